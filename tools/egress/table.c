/* sandbox-egress: sandboxes by source address, the neighbourhood block,
 * the answers cache and the verdict records (egressd.h). */
#include "egressd.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <string.h>

bool egd_addr_from_sa(const struct sockaddr *sa, egd_addr_t *ret)
{
    memset(ret, 0, sizeof *ret);
    if (sa->sa_family == AF_INET) {
        ret->family = AF_INET;
        memcpy(ret->b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) { /* a v4 peer on a dual-stack socket */
            ret->family = AF_INET;
            memcpy(ret->b, a->s6_addr + 12, 4);
        } else {
            ret->family = AF_INET6;
            memcpy(ret->b, a->s6_addr, 16);
        }
        return true;
    }
    return false;
}

bool egd_addr_parse(const char *s, egd_addr_t *ret)
{
    memset(ret, 0, sizeof *ret);
    if (inet_pton(AF_INET, s, ret->b) == 1) {
        ret->family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, s, ret->b) == 1) {
        ret->family = AF_INET6;
        return true;
    }
    return false;
}

void egd_addr_format(const egd_addr_t *a, char *out, size_t outlen)
{
    if (!a->family || !inet_ntop(a->family, a->b, out, (socklen_t)outlen))
        snprintf(out, outlen, "?");
}

bool egd_addr_eq(const egd_addr_t *a, const egd_addr_t *b)
{
    return a->family == b->family && memcmp(a->b, b->b, a->family == AF_INET ? 4 : 16) == 0;
}

egd_sandbox_t *egd_sandbox_find(egd_t *d, const egd_addr_t *a)
{
    for (size_t i = 0; i < EGD_SANDBOXES_MAX; i++)
        if (d->sbx[i].used && egd_addr_eq(&d->sbx[i].addr, a))
            return &d->sbx[i];
    return NULL;
}

bool egd_in_prefix(const egd_addr_t *a, const uint8_t *net, unsigned prefix)
{
    unsigned full = prefix / 8, rest = prefix % 8;
    if (memcmp(a->b, net, full) != 0)
        return false;
    return rest == 0 || ((a->b[full] ^ net[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

/* The ranges the open network refuses too (worker/docker/docker_egress.c),
 * and IPv6's loopback, link-local, unique-local, mapped and multicast. */
static const struct {
    int family;
    uint8_t net[16];
    unsigned prefix;
    const char *what;
} blocked[] = {
    { AF_INET, { 0 }, 8, "this network" },
    { AF_INET, { 10 }, 8, "a private range" },
    { AF_INET, { 100, 64 }, 10, "the CGNAT range" },
    { AF_INET, { 127 }, 8, "loopback" },
    { AF_INET, { 169, 254 }, 16, "link-local (cloud metadata)" },
    { AF_INET, { 172, 16 }, 12, "a private range" },
    { AF_INET, { 192, 0, 0 }, 24, "IETF protocol assignments" },
    { AF_INET, { 192, 168 }, 16, "a private range" },
    { AF_INET, { 198, 18 }, 15, "the benchmarking range" },
    { AF_INET, { 224 }, 4, "multicast" },
    { AF_INET, { 240 }, 4, "a reserved range" },
    { AF_INET6, { 0 }, 96, "an unspecified or IPv4-compatible address" },
    { AF_INET6, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff }, 96, "an IPv4-mapped address" },
    { AF_INET6, { 0xfe, 0x80 }, 10, "link-local" },
    { AF_INET6, { 0xfc }, 7, "a unique-local range" },
    { AF_INET6, { 0xff }, 8, "multicast" },
};

static void host_addrs_refresh(egd_t *d)
{
    int64_t now = time_mono_ms();
    if (d->host_checked && now - d->host_checked < 5000)
        return;
    d->host_checked = now;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        return; /* keep the last list */
    d->nhost = 0;
    for (struct ifaddrs *i = ifa; i && d->nhost < sizeof d->host_addrs / sizeof d->host_addrs[0]; i = i->ifa_next)
        if (i->ifa_addr && egd_addr_from_sa(i->ifa_addr, &d->host_addrs[d->nhost]))
            d->nhost++;
    freeifaddrs(ifa);
}

const char *egd_addr_blocked(egd_t *d, const egd_sandbox_t *s, const egd_addr_t *a)
{
    host_addrs_refresh(d);
    for (unsigned i = 0; i < d->nhost; i++)
        if (egd_addr_eq(&d->host_addrs[i], a))
            return "the worker host itself";
    if (a->family == AF_INET6 && memcmp(a->b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16) == 0)
        return "loopback";
    for (size_t i = 0; s && i < s->ncidrs; i++)
        if (s->cidrs[i].net.family == a->family && egd_in_prefix(a, s->cidrs[i].net.b, s->cidrs[i].prefix))
            return NULL; /* the tenant's egress_allow */
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        if (blocked[i].family == a->family && egd_in_prefix(a, blocked[i].net, blocked[i].prefix))
            return blocked[i].what;
    return NULL;
}

/* ---- answers: name -> addresses the upstream gave, each until its TTL ---- */

static egd_cache_t *cache_find(egd_t *d, const char *name)
{
    for (size_t i = 0; i < EGD_CACHE_MAX; i++)
        if (d->cache[i].name[0] && strcmp(d->cache[i].name, name) == 0)
            return &d->cache[i];
    return NULL;
}

void egd_cache_add(egd_t *d, const char *name, const dnsmsg_addr_t *a, int n)
{
    if (n <= 0 || !name[0])
        return;
    int64_t now = time_mono_ms();
    egd_cache_t *c = cache_find(d, name);
    if (!c) { /* a free slot, else the least recently touched */
        c = &d->cache[0];
        for (size_t i = 0; i < EGD_CACHE_MAX; i++) {
            if (!d->cache[i].name[0]) {
                c = &d->cache[i];
                break;
            }
            if (d->cache[i].touched < c->touched)
                c = &d->cache[i];
        }
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", name);
    }
    c->touched = now;
    for (int k = 0; k < n; k++) {
        egd_addr_t x = { .family = a[k].family };
        memcpy(x.b, a[k].addr, 16);
        uint32_t ttl = a[k].ttl < EGD_TTL_MIN_S ? EGD_TTL_MIN_S : a[k].ttl > EGD_TTL_MAX_S ? EGD_TTL_MAX_S : a[k].ttl;
        int64_t until = now + (int64_t)ttl * 1000;
        unsigned slot = c->naddrs;
        for (unsigned j = 0; j < c->naddrs; j++)
            if (egd_addr_eq(&c->addrs[j], &x) || c->until[j] < now) {
                slot = j;
                break;
            }
        if (slot == c->naddrs) {
            if (c->naddrs == EGD_CACHE_ADDRS) { /* the one ending first goes */
                slot = 0;
                for (unsigned j = 1; j < c->naddrs; j++)
                    if (c->until[j] < c->until[slot])
                        slot = j;
            } else {
                c->naddrs++;
            }
        }
        c->addrs[slot] = x;
        c->until[slot] = until;
    }
}

bool egd_cache_has(egd_t *d, const char *name, const egd_addr_t *a)
{
    egd_cache_t *c = cache_find(d, name);
    int64_t now = time_mono_ms();
    for (unsigned j = 0; c && j < c->naddrs; j++)
        if (c->until[j] >= now && egd_addr_eq(&c->addrs[j], a))
            return true;
    return false;
}

void egd_record(egd_t *d, const egd_sandbox_t *s, const char *kind, const char *name, const char *addr,
                unsigned port, bool allowed, const char *why, uint64_t out, uint64_t in)
{
    egd_record_t *r;
    if (d->rec_n == EGD_RECORDS_MAX) { /* full: the oldest goes, counted */
        r = &d->records[d->rec_head];
        d->rec_head = (d->rec_head + 1) % EGD_RECORDS_MAX;
        d->rec_dropped++;
    } else {
        r = &d->records[(d->rec_head + d->rec_n) % EGD_RECORDS_MAX];
        d->rec_n++;
    }
    memset(r, 0, sizeof *r);
    r->at_ms = time_wall_ms();
    snprintf(r->sandbox, sizeof r->sandbox, "%s", s ? s->id : "");
    snprintf(r->tenant, sizeof r->tenant, "%s", s ? s->tenant : "");
    snprintf(r->kind, sizeof r->kind, "%s", kind);
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    snprintf(r->addr, sizeof r->addr, "%s", addr ? addr : "");
    r->port = port;
    r->allowed = allowed;
    snprintf(r->why, sizeof r->why, "%s", why ? why : "");
    r->bytes_out = out;
    r->bytes_in = in;
}

bool egd_decide(const egd_sandbox_t *s, const char *name, char *why, size_t whylen)
{
    const char *rule = NULL;
    bool ok = egress_allowed(&s->rules, name, &rule);
    if (strcmp(rule, "default") == 0)
        snprintf(why, whylen, "default %s", ok ? "allow" : "deny");
    else if (strcmp(rule, "not a domain name") == 0)
        snprintf(why, whylen, "%s", rule);
    else
        snprintf(why, whylen, "%s %s", ok ? "allow" : "deny", rule);
    return ok;
}
