/* sandbox-egress: UDP other than DNS from a filtered sandbox (egressd.h).
 * The host's iptables hand every such datagram to this socket by TPROXY,
 * its original destination intact. A flow (the sandbox's address and port,
 * the destination's) goes out only when the sandbox's rules list its port
 * (egress "udp") and the destination is an address the upstream gave for a
 * name those rules allow, not the host's neighbourhood; then the filter
 * sends from a socket of its own to that destination and answers the
 * sandbox from the destination's address (a transparent socket bound
 * there). A refused flow is remembered for a while, so its datagrams are
 * dropped without being decided and recorded again. */
#include "egressd.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netaddr.h"

#ifndef IP_TRANSPARENT
#define IP_TRANSPARENT 19
#endif
#ifndef IP_RECVORIGDSTADDR
#define IP_RECVORIGDSTADDR 20
#endif
#ifndef IP_ORIGDSTADDR
#define IP_ORIGDSTADDR 20
#endif

#define UDP_DGRAM_MAX 65535

typedef struct egd_flow {
    egd_t *d;
    struct egd_flow *next, *prev;
    struct sockaddr_in src, dst;   /* the sandbox's end, where it meant to go */
    egd_addr_t src_addr, dst_addr;
    bool allowed;
    int in_fd, out_fd;             /* toward the sandbox (from dst), toward dst */
    struct event *in_ev, *out_ev;
    int64_t last;                  /* ms, monotonic: its last datagram either way */
    uint64_t bytes_out, bytes_in;
    char name[EGRESS_DOMAIN_MAX + 1], why[160];
} egd_flow_t;

static uint8_t dgram[UDP_DGRAM_MAX];

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
    d->nflows--;
    if (f->in_ev)
        event_free(f->in_ev);
    if (f->out_ev)
        event_free(f->out_ev);
    if (f->in_fd >= 0)
        close(f->in_fd);
    if (f->out_fd >= 0)
        close(f->out_fd);
    free(f);
}

static egd_flow_t *flow_find(egd_t *d, const struct sockaddr_in *src, const struct sockaddr_in *dst)
{
    for (egd_flow_t *f = d->flows; f; f = f->next)
        if (f->src.sin_addr.s_addr == src->sin_addr.s_addr && f->src.sin_port == src->sin_port &&
            f->dst.sin_addr.s_addr == dst->sin_addr.s_addr && f->dst.sin_port == dst->sin_port)
            return f;
    return NULL;
}

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

static void on_in(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    egd_flow_t *f = arg;
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, dgram, sizeof dgram, 0);
        if (n < 0)
            return; /* EAGAIN, or an ICMP error of an earlier datagram */
        f->last = time_mono_ms();
        if (send(f->out_fd, dgram, (size_t)n, 0) == n)
            f->bytes_out += (uint64_t)n;
    }
}

static void on_out(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    egd_flow_t *f = arg;
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, dgram, sizeof dgram, 0);
        if (n < 0)
            return;
        f->last = time_mono_ms();
        if (send(f->in_fd, dgram, (size_t)n, 0) == n)
            f->bytes_in += (uint64_t)n;
    }
}

/* The two sockets of an allowed flow: 0, or -1 with why. */
static int flow_open(egd_flow_t *f, char *why, size_t whylen)
{
    egd_t *d = f->d;
    int one = 1;
    f->out_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    f->in_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (f->out_fd < 0 || f->in_fd < 0 || connect(f->out_fd, (struct sockaddr *)&f->dst, sizeof f->dst) != 0 ||
        setsockopt(f->in_fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
        setsockopt(f->in_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(f->in_fd, (struct sockaddr *)&f->dst, sizeof f->dst) != 0 ||
        connect(f->in_fd, (struct sockaddr *)&f->src, sizeof f->src) != 0) {
        snprintf(why, whylen, "the filter cannot relay it: %s", strerror(errno));
        return -1;
    }
    f->in_ev = event_new(d->base, f->in_fd, EV_READ | EV_PERSIST, on_in, f);
    f->out_ev = event_new(d->base, f->out_fd, EV_READ | EV_PERSIST, on_out, f);
    if (!f->in_ev || !f->out_ev || event_add(f->in_ev, NULL) < 0 || event_add(f->out_ev, NULL) < 0) {
        snprintf(why, whylen, "the filter cannot relay it: out of memory");
        return -1;
    }
    return 0;
}

/* A new flow of s: decided, recorded when refused, kept either way while
 * there is room. */
static egd_flow_t *flow_new(egd_t *d, egd_sandbox_t *s, const struct sockaddr_in *src, const struct sockaddr_in *dst)
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
    f->dst = *dst;
    f->src_addr = s->addr;
    f->dst_addr = da;
    f->in_fd = f->out_fd = -1;
    f->last = time_mono_ms();
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->why, sizeof f->why, "%s", why);
    f->next = d->flows;
    if (d->flows)
        d->flows->prev = f;
    d->flows = f;
    d->nflows++;
    s->flows++;
    if (ok && flow_open(f, f->why, sizeof f->why) == 0) {
        f->allowed = true;
        s->n.udp_allowed++;
        return f;
    }
    if (f->in_ev) {
        event_free(f->in_ev);
        f->in_ev = NULL;
    }
    if (f->out_ev) {
        event_free(f->out_ev);
        f->out_ev = NULL;
    }
    if (f->in_fd >= 0)
        close(f->in_fd);
    if (f->out_fd >= 0)
        close(f->out_fd);
    f->in_fd = f->out_fd = -1;
    s->n.udp_refused++;
    egd_record(d, s, "udp", name, a, port, false, f->why, 0, 0);
    return f;
}

static void on_listen(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    egd_t *d = arg;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_in src;
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(struct sockaddr_in)) + 64];
        } ctl;
        struct iovec iov = { dgram, sizeof dgram };
        struct msghdr m = { .msg_name = &src, .msg_namelen = sizeof src, .msg_iov = &iov, .msg_iovlen = 1,
                            .msg_control = ctl.b, .msg_controllen = sizeof ctl.b };
        ssize_t n = recvmsg(fd, &m, 0);
        if (n < 0)
            return;
        struct sockaddr_in dst;
        bool have_dst = false;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR &&
                c->cmsg_len >= CMSG_LEN(sizeof dst)) {
                memcpy(&dst, CMSG_DATA(c), sizeof dst);
                have_dst = true;
            }
        egd_addr_t sa;
        if (!have_dst || m.msg_namelen < sizeof src || src.sin_family != AF_INET || dst.sin_family != AF_INET ||
            !egd_addr_from_sa((struct sockaddr *)&src, &sa))
            continue;
        egd_sandbox_t *s = egd_sandbox_find(d, &sa);
        if (!s)
            continue; /* not a sandbox of ours: nothing at all */
        egd_flow_t *f = flow_find(d, &src, &dst);
        if (!f)
            f = flow_new(d, s, &src, &dst);
        if (!f || !f->allowed)
            continue;
        /* the flow's first datagram (later ones reach its own socket) */
        f->last = time_mono_ms();
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
    int one = 1;
    d->udp_fd = -1;
    if (netaddr_resolve_bind(listen, &ss, &len, err, errlen) != 0 || ss.ss_family != AF_INET) {
        if (!err[0] || ss.ss_family != AF_INET)
            snprintf(err, errlen, "--udp %s is not IPV4:PORT", listen);
        return -1;
    }
    d->udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d->udp_fd < 0 || setsockopt(d->udp_fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
        setsockopt(d->udp_fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one) != 0 ||
        bind(d->udp_fd, (struct sockaddr *)&ss, len) != 0) {
        snprintf(err, errlen, "--udp %s: %s (a transparent socket needs CAP_NET_ADMIN)", listen, strerror(errno));
        return -1;
    }
    d->udp_ev = event_new(d->base, d->udp_fd, EV_READ | EV_PERSIST, on_listen, d);
    d->udp_sweep_ev = event_new(d->base, -1, EV_PERSIST, on_sweep, d);
    struct timeval second = { 1, 0 };
    if (!d->udp_ev || !d->udp_sweep_ev || event_add(d->udp_ev, NULL) < 0 ||
        event_add(d->udp_sweep_ev, &second) < 0) {
        snprintf(err, errlen, "event setup failed");
        return -1;
    }
    return 0;
}

void egd_udp_stop(egd_t *d)
{
    while (d->flows)
        flow_free(d->flows);
    if (d->udp_ev)
        event_free(d->udp_ev);
    if (d->udp_sweep_ev)
        event_free(d->udp_sweep_ev);
    if (d->udp_fd >= 0)
        close(d->udp_fd);
    d->udp_fd = -1;
}
