/* sandbox-egress: UDP other than DNS from a filtered sandbox (egressd.h).
 * The host's iptables DNAT every such datagram to one of this filter's
 * EGD_UDP_PORTS ports (a range, so that one sandbox port may talk to as
 * many destinations at once); the kernel's connection tracking says where
 * it meant to go (a ctnetlink lookup by the reply tuple, as SO_ORIGINAL_DST
 * does for TCP; TPROXY would not do: a Docker bridge's br_netfilter runs
 * PREROUTING before the packet reaches IP, which drops TPROXY's socket).
 * A flow (the sandbox's address and port, the filter port it came to) goes
 * out only when the sandbox's rules list the destination's port (egress
 * "udp") and the destination is an address the upstream gave for a name
 * those rules allow, not the host's neighbourhood; then the filter sends
 * from a socket of its own connected there, and answers the sandbox from
 * the port the datagram came to (the DNAT's reverse makes that the
 * destination's address). A refused flow is remembered for a while, so
 * its datagrams are dropped without being decided and recorded again. */
#include "egressd.h"

#include <errno.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "netaddr.h"

#define UDP_DGRAM_MAX 65535
#define FLOW_BUCKETS  8192
/* a flow quiet this long is looked up again before its next datagram goes:
 * the kernel forgets an unanswered UDP mapping after 30 s, and the port may
 * then carry a datagram of the same sandbox port to somewhere else */
#define FLOW_RECHECK_MS 10000

typedef struct egd_flow {
    egd_t *d;
    struct egd_flow *next, *prev, *hnext;
    struct sockaddr_in src;        /* the sandbox's end */
    unsigned lport;                /* the index of the filter port it came to */
    struct sockaddr_in dst;        /* where it meant to go */
    egd_addr_t src_addr, dst_addr;
    bool allowed;
    int out_fd;                    /* toward dst */
    struct event *out_ev;
    int64_t last;                  /* ms, monotonic: its last datagram either way */
    uint64_t bytes_out, bytes_in;
    char name[EGRESS_DOMAIN_MAX + 1], why[160];
} egd_flow_t;

typedef struct egd_udp_port {
    egd_t *d;
    unsigned index;
} egd_udp_port_t;

static uint8_t dgram[UDP_DGRAM_MAX];
static egd_flow_t *buckets[FLOW_BUCKETS];
static egd_udp_port_t port_args[EGD_UDP_PORTS];
static uint32_t ct_seq;

static unsigned bucket_of(const struct sockaddr_in *src, unsigned lport)
{
    uint32_t h = 2166136261u;
    const uint8_t *p = (const uint8_t *)&src->sin_addr;
    for (int i = 0; i < 4; i++)
        h = (h ^ p[i]) * 16777619u;
    h = (h ^ src->sin_port) * 16777619u;
    h = (h ^ lport) * 16777619u;
    return h % FLOW_BUCKETS;
}

static egd_flow_t *flow_find(const struct sockaddr_in *src, unsigned lport)
{
    for (egd_flow_t *f = buckets[bucket_of(src, lport)]; f; f = f->hnext)
        if (f->lport == lport && f->src.sin_addr.s_addr == src->sin_addr.s_addr && f->src.sin_port == src->sin_port)
            return f;
    return NULL;
}

/* Closes f's socket toward its destination (none left open). */
static void flow_close_out(egd_flow_t *f)
{
    if (f->out_ev)
        event_free(f->out_ev);
    if (f->out_fd >= 0)
        close(f->out_fd);
    f->out_ev = NULL;
    f->out_fd = -1;
}

static void flow_free(egd_flow_t *f)
{
    egd_t *d = f->d;
    egd_sandbox_t *s = egd_sandbox_find(d, &f->src_addr);
    if (f->allowed) {
        char a[48];
        egd_addr_format(&f->dst_addr, a, sizeof a);
        if (s) {
            s->n.bytes_out += f->bytes_out;
            s->n.bytes_in += f->bytes_in;
        }
        egd_record(d, s, "udp", f->name, a, ntohs(f->dst.sin_port), true, f->why, f->bytes_out, f->bytes_in);
    }
    if (s && s->flows)
        s->flows--;
    if (f->prev)
        f->prev->next = f->next;
    else
        d->flows = f->next;
    if (f->next)
        f->next->prev = f->prev;
    for (egd_flow_t **pp = &buckets[bucket_of(&f->src, f->lport)]; *pp; pp = &(*pp)->hnext)
        if (*pp == f) {
            *pp = f->hnext;
            break;
        }
    d->nflows--;
    flow_close_out(f);
    free(f);
}

/* ---- where a datagram meant to go: the kernel's connection tracking ---- */

static void nla_put(uint8_t *buf, size_t *off, uint16_t type, const void *data, uint16_t len)
{
    struct nlattr *a = (struct nlattr *)(void *)(buf + *off);
    a->nla_type = type;
    a->nla_len = (uint16_t)(NLA_HDRLEN + len);
    memcpy(buf + *off + NLA_HDRLEN, data, len);
    *off += NLA_ALIGN(a->nla_len);
}

static size_t nla_nest_start(uint8_t *buf, size_t *off, uint16_t type)
{
    size_t at = *off;
    struct nlattr *a = (struct nlattr *)(void *)(buf + at);
    a->nla_type = (uint16_t)(type | NLA_F_NESTED);
    *off += NLA_HDRLEN;
    return at;
}

static void nla_nest_end(uint8_t *buf, size_t *off, size_t at)
{
    ((struct nlattr *)(void *)(buf + at))->nla_len = (uint16_t)(*off - at);
}

/* The attribute type in [p, p+len), or NULL. */
static const struct nlattr *nla_find(const uint8_t *p, size_t len, uint16_t type)
{
    while (len >= NLA_HDRLEN) {
        const struct nlattr *a = (const struct nlattr *)(const void *)p;
        if (a->nla_len < NLA_HDRLEN || a->nla_len > len)
            return NULL;
        if ((a->nla_type & NLA_TYPE_MASK) == type)
            return a;
        size_t step = NLA_ALIGN(a->nla_len);
        if (step >= len)
            return NULL;
        p += step;
        len -= step;
    }
    return NULL;
}

static const struct nlattr *nla_in(const struct nlattr *a, uint16_t type)
{
    return a ? nla_find((const uint8_t *)a + NLA_HDRLEN, a->nla_len - NLA_HDRLEN, type) : NULL;
}

/* The original destination of the tracked connection whose reply goes from
 * (to, port) to src: 0, or -1 when there is none. */
static int ct_orig_dst(egd_t *d, const struct sockaddr_in *src, const struct sockaddr_in *to, struct sockaddr_in *ret)
{
    uint8_t buf[1024] __attribute__((aligned(4)));
    memset(buf, 0, 256);
    struct nlmsghdr *h = (struct nlmsghdr *)(void *)buf;
    h->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
    h->nlmsg_flags = NLM_F_REQUEST;
    h->nlmsg_seq = ++ct_seq;
    struct nfgenmsg *g = (struct nfgenmsg *)(void *)(buf + NLMSG_HDRLEN);
    g->nfgen_family = AF_INET;
    g->version = NFNETLINK_V0;
    size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof *g);
    uint8_t proto = IPPROTO_UDP;
    size_t tuple = nla_nest_start(buf, &off, CTA_TUPLE_REPLY);
    size_t ip = nla_nest_start(buf, &off, CTA_TUPLE_IP);
    nla_put(buf, &off, CTA_IP_V4_SRC, &to->sin_addr, 4);
    nla_put(buf, &off, CTA_IP_V4_DST, &src->sin_addr, 4);
    nla_nest_end(buf, &off, ip);
    size_t pr = nla_nest_start(buf, &off, CTA_TUPLE_PROTO);
    nla_put(buf, &off, CTA_PROTO_NUM, &proto, 1);
    nla_put(buf, &off, CTA_PROTO_SRC_PORT, &to->sin_port, 2);
    nla_put(buf, &off, CTA_PROTO_DST_PORT, &src->sin_port, 2);
    nla_nest_end(buf, &off, pr);
    nla_nest_end(buf, &off, tuple);
    h->nlmsg_len = (uint32_t)off;
    if (send(d->ct_fd, buf, off, 0) != (ssize_t)off)
        return -1;
    for (int tries = 0; tries < 4; tries++) {
        ssize_t n = recv(d->ct_fd, buf, sizeof buf, 0);
        if (n < (ssize_t)NLMSG_HDRLEN)
            return -1; /* (a timeout: the socket waits at most 200 ms) */
        h = (struct nlmsghdr *)(void *)buf;
        if (h->nlmsg_seq != ct_seq || h->nlmsg_len > (size_t)n)
            continue; /* an answer to an earlier question that timed out */
        if (h->nlmsg_type == NLMSG_ERROR || h->nlmsg_len < NLMSG_HDRLEN + NLMSG_ALIGN(sizeof *g))
            return -1;
        size_t at = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof *g);
        const struct nlattr *orig = nla_find(buf + at, h->nlmsg_len - at, CTA_TUPLE_ORIG);
        const struct nlattr *dip = nla_in(nla_in(orig, CTA_TUPLE_IP), CTA_IP_V4_DST);
        const struct nlattr *dport = nla_in(nla_in(orig, CTA_TUPLE_PROTO), CTA_PROTO_DST_PORT);
        if (!dip || !dport || dip->nla_len < NLA_HDRLEN + 4 || dport->nla_len < NLA_HDRLEN + 2)
            return -1;
        memset(ret, 0, sizeof *ret);
        ret->sin_family = AF_INET;
        memcpy(&ret->sin_addr, (const uint8_t *)dip + NLA_HDRLEN, 4);
        memcpy(&ret->sin_port, (const uint8_t *)dport + NLA_HDRLEN, 2);
        return 0;
    }
    return -1;
}

/* ---- flows ---- */

/* A name the rules of s allow whose answers (still in their TTL) hold a;
 * false with why when there is none. */
static bool name_of(egd_t *d, const egd_sandbox_t *s, const egd_addr_t *a, char *name, size_t namelen, char *why,
                    size_t whylen)
{
    int64_t now = time_mono_ms();
    for (size_t i = 0; i < EGD_CACHE_MAX; i++) {
        const egd_cache_t *c = &d->cache[i];
        if (!c->name[0])
            continue;
        for (unsigned j = 0; j < c->naddrs; j++)
            if (c->until[j] >= now && egd_addr_eq(&c->addrs[j], a) && egd_decide(s, c->name, why, whylen)) {
                snprintf(name, namelen, "%s", c->name);
                return true;
            }
    }
    snprintf(why, whylen, "not an address the resolver gave for a name the rules allow");
    return false;
}

static void on_out(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    egd_flow_t *f = arg;
    egd_t *d = f->d;
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, dgram, sizeof dgram, 0);
        if (n < 0)
            return; /* EAGAIN, or an ICMP error of an earlier datagram */
        f->last = time_mono_ms();
        if (sendto(d->udp_fds[f->lport], dgram, (size_t)n, 0, (struct sockaddr *)&f->src, sizeof f->src) == n)
            f->bytes_in += (uint64_t)n;
    }
}

/* A new flow of s to dst: decided, recorded when refused, kept either way
 * while there is room. */
static egd_flow_t *flow_new(egd_t *d, egd_sandbox_t *s, const struct sockaddr_in *src, unsigned lport,
                            const struct sockaddr_in *dst)
{
    egd_addr_t da;
    egd_addr_from_sa((const struct sockaddr *)dst, &da);
    char a[48], why[160] = "", name[EGRESS_DOMAIN_MAX + 1] = "";
    egd_addr_format(&da, a, sizeof a);
    unsigned port = ntohs(dst->sin_port);
    if (d->nflows >= EGD_FLOWS_MAX || s->flows >= EGD_FLOWS_PER_SBX) {
        s->n.udp_refused++; /* not recorded: the table is full of its flows */
        return NULL;
    }
    const char *blocked = egd_addr_blocked(d, s, &da);
    bool ok = false;
    if (blocked)
        snprintf(why, sizeof why, "%s", blocked);
    else if (!egress_udp_allowed(&s->rules, port))
        snprintf(why, sizeof why, "no udp rule for port %u", port);
    else
        ok = name_of(d, s, &da, name, sizeof name, why, sizeof why);
    egd_flow_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->d = d;
    f->src = *src;
    f->lport = lport;
    f->dst = *dst;
    f->src_addr = s->addr;
    f->dst_addr = da;
    f->out_fd = -1;
    f->last = time_mono_ms();
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->why, sizeof f->why, "%s", why);
    f->next = d->flows;
    if (d->flows)
        d->flows->prev = f;
    d->flows = f;
    unsigned b = bucket_of(src, lport);
    f->hnext = buckets[b];
    buckets[b] = f;
    d->nflows++;
    s->flows++;
    if (ok) {
        f->out_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (f->out_fd >= 0 && connect(f->out_fd, (const struct sockaddr *)dst, sizeof *dst) == 0 &&
            (f->out_ev = event_new(d->base, f->out_fd, EV_READ | EV_PERSIST, on_out, f)) &&
            event_add(f->out_ev, NULL) == 0) {
            f->allowed = true;
            s->n.udp_allowed++;
            return f;
        }
        snprintf(f->why, sizeof f->why, "the filter cannot relay it: %s", strerror(errno));
        flow_close_out(f);
    }
    s->n.udp_refused++;
    egd_record(d, s, "udp", name, a, port, false, f->why, 0, 0);
    return f;
}

static void on_listen(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    const egd_udp_port_t *lp = arg;
    egd_t *d = lp->d;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_in src;
        socklen_t sl = sizeof src;
        ssize_t n = recvfrom(fd, dgram, sizeof dgram, 0, (struct sockaddr *)&src, &sl);
        if (n < 0)
            return;
        egd_addr_t sa;
        if (sl < sizeof src || src.sin_family != AF_INET || !egd_addr_from_sa((struct sockaddr *)&src, &sa))
            continue;
        egd_sandbox_t *s = egd_sandbox_find(d, &sa);
        if (!s)
            continue; /* not a sandbox of ours: nothing at all */
        int64_t now = time_mono_ms();
        egd_flow_t *f = flow_find(&src, lp->index);
        struct sockaddr_in dst;
        bool have = false;
        if (f && now - f->last > FLOW_RECHECK_MS) {
            have = ct_orig_dst(d, &src, &d->udp_at[lp->index], &dst) == 0;
            if (!have || dst.sin_addr.s_addr != f->dst.sin_addr.s_addr || dst.sin_port != f->dst.sin_port) {
                flow_free(f); /* the port carries another mapping now */
                f = NULL;
            }
        }
        if (!f) {
            if (!have && ct_orig_dst(d, &src, &d->udp_at[lp->index], &dst) < 0)
                continue; /* no mapping: not a datagram the host's rules sent here */
            f = flow_new(d, s, &src, lp->index, &dst);
        }
        if (!f || !f->allowed)
            continue;
        f->last = now;
        if (send(f->out_fd, dgram, (size_t)n, 0) == n)
            f->bytes_out += (uint64_t)n;
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    egd_t *d = arg;
    int64_t now = time_mono_ms();
    for (egd_flow_t *f = d->flows, *next; f; f = next) {
        next = f->next;
        if (now - f->last > (f->allowed ? EGD_FLOW_IDLE_S : EGD_FLOW_REFUSED_S) * 1000LL)
            flow_free(f);
    }
}

unsigned egd_udp_recheck(egd_t *d, egd_sandbox_t *s, bool all)
{
    unsigned closed = 0;
    for (egd_flow_t *f = d->flows, *next; f; f = next) {
        next = f->next;
        if (!egd_addr_eq(&f->src_addr, &s->addr))
            continue;
        char why[160], name[EGRESS_DOMAIN_MAX + 1];
        /* a refused flow is decided again at its next datagram */
        if (all || !f->allowed || !egress_udp_allowed(&s->rules, ntohs(f->dst.sin_port)) ||
            !name_of(d, s, &f->dst_addr, name, sizeof name, why, sizeof why)) {
            closed += f->allowed;
            flow_free(f);
        }
    }
    return closed;
}

int egd_udp_start(egd_t *d, const char *listen, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    for (unsigned i = 0; i < EGD_UDP_PORTS; i++)
        d->udp_fds[i] = -1;
    if (netaddr_resolve_bind(listen, &ss, &len, err, errlen) != 0 || ss.ss_family != AF_INET) {
        if (!err[0] || ss.ss_family != AF_INET)
            snprintf(err, errlen, "--udp %s is not IPV4:PORT", listen);
        return -1;
    }
    struct sockaddr_in base;
    memcpy(&base, &ss, sizeof base);
    if (ntohs(base.sin_port) == 0 || ntohs(base.sin_port) > 65535 - EGD_UDP_PORTS) {
        snprintf(err, errlen, "--udp %s: a port from 1 to %d (the first of %d)", listen, 65535 - EGD_UDP_PORTS,
                 EGD_UDP_PORTS);
        return -1;
    }
    d->ct_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
    struct timeval tv = { 0, 200 * 1000 };
    if (d->ct_fd < 0 || bind(d->ct_fd, (struct sockaddr *)&nl, sizeof nl) != 0 ||
        setsockopt(d->ct_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        snprintf(err, errlen, "--udp: the kernel's connection tracking (netlink): %s", strerror(errno));
        return -1;
    }
    for (unsigned i = 0; i < EGD_UDP_PORTS; i++) {
        d->udp_at[i] = base;
        d->udp_at[i].sin_port = htons((uint16_t)(ntohs(base.sin_port) + i));
        d->udp_fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (d->udp_fds[i] < 0 || bind(d->udp_fds[i], (struct sockaddr *)&d->udp_at[i], sizeof d->udp_at[i]) != 0) {
            snprintf(err, errlen, "--udp %s: bind port %u: %s", listen, ntohs(d->udp_at[i].sin_port),
                     strerror(errno));
            return -1;
        }
        port_args[i] = (egd_udp_port_t){ d, i };
        d->udp_evs[i] = event_new(d->base, d->udp_fds[i], EV_READ | EV_PERSIST, on_listen, &port_args[i]);
        if (!d->udp_evs[i] || event_add(d->udp_evs[i], NULL) < 0) {
            snprintf(err, errlen, "event setup failed");
            return -1;
        }
    }
    d->udp_sweep_ev = event_new(d->base, -1, EV_PERSIST, on_sweep, d);
    struct timeval second = { 1, 0 };
    if (!d->udp_sweep_ev || event_add(d->udp_sweep_ev, &second) < 0) {
        snprintf(err, errlen, "event setup failed");
        return -1;
    }
    return 0;
}

void egd_udp_stop(egd_t *d)
{
    while (d->flows)
        flow_free(d->flows);
    for (unsigned i = 0; i < EGD_UDP_PORTS; i++) {
        if (d->udp_evs[i])
            event_free(d->udp_evs[i]);
        if (d->udp_fds[i] >= 0)
            close(d->udp_fds[i]);
        d->udp_evs[i] = NULL;
        d->udp_fds[i] = -1;
    }
    if (d->udp_sweep_ev)
        event_free(d->udp_sweep_ev);
    d->udp_sweep_ev = NULL;
    if (d->ct_fd >= 0)
        close(d->ct_fd);
    d->ct_fd = -1;
}
