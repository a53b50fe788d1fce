/* sandbox-egress: the worker's egress filter for sandboxes with egress
 * rules by domain (issue 33, docs/network.md). One libevent loop:
 *   - dns.c: the only resolver such a sandbox reaches (its UDP port 53 is
 *     redirected here): allowed names are asked of the upstream, others
 *     answered NXDOMAIN without asking anyone;
 *   - proxy.c: every TCP connection of such a sandbox (redirected here):
 *     the TLS SNI or HTTP Host of its first bytes decides, and the filter
 *     connects itself to the original address only when that name resolves
 *     to it and the address is not the host's neighbourhood;
 *   - udp.c: every other UDP datagram of such a sandbox (redirected here;
 *     the kernel's connection tracking says where it meant to go): out
 *     only to a port its rules list, to an address the upstream gave for a
 *     name they allow;
 *   - control.c: the worker's unix socket (JSON lines): which source
 *     address is which sandbox with which rules, counters, verdict records.
 * A sandbox is known by its source address on the filtered bridge (its
 * container has no CAP_NET_RAW or NET_ADMIN to forge another). */
#ifndef SBX_EGRESSD_H
#define SBX_EGRESSD_H

#include <event2/event.h>
#include <json-c/json.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnsmsg.h"
#include "egress.h"
#include "egress_peek.h"
#include "timeutil.h"

#define EGD_SANDBOXES_MAX    4096
#define EGD_CIDRS_MAX        32
#define EGD_CONNS_MAX        8192   /* live proxied connections in all */
#define EGD_CONNS_PER_SBX    512
#define EGD_PENDING_MAX      4096   /* DNS questions in flight upstream */
#define EGD_PENDING_PER_SBX  256
#define EGD_CACHE_MAX        8192   /* names whose answers are remembered */
#define EGD_CACHE_ADDRS      16
#define EGD_RECORDS_MAX      4096   /* verdict records kept until drained */
#define EGD_RELAY_HIGH       (256 * 1024) /* bytes queued toward one side before its reader waits */
#define EGD_PEEK_TIMEOUT_S   10     /* the default of --name-timeout */
#define EGD_CONNECT_TIMEOUT_S 10
#define EGD_DNS_TIMEOUT_MS   3000
#define EGD_TTL_MIN_S        30
#define EGD_TTL_MAX_S        3600
#define EGD_UDP_PORTS        8      /* --udp's port and the next ones: a sandbox port's destinations at once */
#define EGD_FLOWS_MAX        4096   /* UDP flows (sandbox end, destination) in all */
#define EGD_FLOWS_PER_SBX    256
#define EGD_FLOW_IDLE_S      60     /* an allowed flow with no datagram either way this long ends */
#define EGD_FLOW_REFUSED_S   10     /* a refused flow's datagrams are dropped unrecorded this long */
#define EGD_SECRETS_MAX      8      /* secrets a sandbox's requests may carry */
#define EGD_SECRET_HOSTS_MAX 16     /* hosts one secret is bound to */

/* An address of either family. */
typedef struct egd_addr {
    int family;       /* AF_INET, AF_INET6; 0: none */
    uint8_t b[16];
} egd_addr_t;

typedef struct egd_cidr {
    egd_addr_t net;
    unsigned prefix;
} egd_cidr_t;

typedef struct egd_counts {
    uint64_t tcp_allowed, tcp_refused, dns_allowed, dns_refused, udp_allowed, udp_refused, bytes_out, bytes_in;
} egd_counts_t;

typedef struct egd_sandbox {
    egd_addr_t addr;
    char id[64], tenant[64];
    egress_rules_t rules;
    egd_cidr_t cidrs[EGD_CIDRS_MAX]; /* the tenant's egress_allow: past the neighbourhood block */
    size_t ncidrs;
    egd_counts_t n;
    unsigned conns, pending, flows;
    struct egd_tls *tls;             /* its CA and secrets (tls.c); NULL: none */
    bool used;
} egd_sandbox_t;

typedef struct egd_cache {
    char name[EGRESS_DOMAIN_MAX + 1];
    egd_addr_t addrs[EGD_CACHE_ADDRS];
    int64_t until[EGD_CACHE_ADDRS]; /* ms, monotonic */
    unsigned naddrs;
    int64_t touched;
} egd_cache_t;

/* One verdict, as drained by the worker ("records"). */
typedef struct egd_record {
    int64_t at_ms;        /* wall clock */
    char sandbox[64], tenant[64];
    char kind[4];         /* "tcp", "udp", "dns" */
    char name[EGRESS_DOMAIN_MAX + 1];
    char addr[48];        /* the original destination (tcp) */
    unsigned port;        /* tcp, udp: the destination port; dns: the query type */
    bool allowed;
    char why[160];        /* the rule or the reason */
    uint64_t bytes_out, bytes_in;
} egd_record_t;

struct egd_conn;
struct egd_flow;
struct egd_resolve;

typedef struct egd {
    struct event_base *base;
    egd_sandbox_t *sbx;       /* EGD_SANDBOXES_MAX slots */
    egd_cache_t *cache;       /* EGD_CACHE_MAX slots */
    egd_record_t *records;    /* a ring */
    size_t rec_head, rec_n;
    uint64_t rec_dropped;
    /* dns */
    int dns_fd, up_fd;
    struct event *dns_ev, *up_ev, *sweep_ev;
    struct egd_pending **pending; /* by upstream id: 65536 slots */
    unsigned npending;
    /* proxy */
    struct evconnlistener *tcp;
    struct egd_conn *conns;   /* every live connection */
    unsigned nconns;
    /* udp */
    int udp_fds[EGD_UDP_PORTS], ct_fd;
    struct sockaddr_in udp_at[EGD_UDP_PORTS];
    struct event *udp_evs[EGD_UDP_PORTS], *udp_sweep_ev;
    struct egd_flow *flows;   /* every UDP flow, allowed or refused */
    unsigned nflows;
    /* control */
    struct evconnlistener *ctl;
    struct bufferevent *ctl_clients[8];
    int name_timeout_s;       /* a connection names its host within this */
    egd_addr_t host_addrs[64]; /* the host's own addresses (never a destination) */
    unsigned nhost;
    int64_t host_checked;
} egd_t;

/* table.c */
bool egd_addr_from_sa(const struct sockaddr *sa, egd_addr_t *ret);
bool egd_addr_parse(const char *s, egd_addr_t *ret);
void egd_addr_format(const egd_addr_t *a, char *out, size_t outlen);
bool egd_addr_eq(const egd_addr_t *a, const egd_addr_t *b);
egd_sandbox_t *egd_sandbox_find(egd_t *d, const egd_addr_t *a);
bool egd_in_prefix(const egd_addr_t *a, const uint8_t *net, unsigned prefix);
/* Why the filter will not connect a sandbox to a (the host, loopback, a
 * private or reserved range not in its cidrs), or NULL. */
const char *egd_addr_blocked(egd_t *d, const egd_sandbox_t *s, const egd_addr_t *a);
/* Decides name under s's rules; why gets "allow RULE", "deny RULE",
 * "default allow", "default deny" or "not a domain name". */
bool egd_decide(const egd_sandbox_t *s, const char *name, char *why, size_t whylen);
void egd_cache_add(egd_t *d, const char *name, const dnsmsg_addr_t *a, int n);
bool egd_cache_has(egd_t *d, const char *name, const egd_addr_t *a);
void egd_record(egd_t *d, const egd_sandbox_t *s, const char *kind, const char *name, const char *addr,
                unsigned port, bool allowed, const char *why, uint64_t out, uint64_t in);

/* dns.c */
int egd_dns_start(egd_t *d, const char *listen, const char *upstream, char *err, size_t errlen);
void egd_dns_stop(egd_t *d);   /* (before egd_proxy_stop: lookups end unanswered) */
/* Resolves name (A and AAAA) through the upstream; cb(ud, addrs, n) once,
 * n 0 when it has none or the upstream did not answer in time. Answers go
 * into the cache too. */
typedef void (*egd_resolve_cb)(void *ud, const dnsmsg_addr_t *addrs, int n);
int egd_resolve(egd_t *d, const char *name, egd_resolve_cb cb, void *ud);

/* proxy.c */
int egd_proxy_start(egd_t *d, const char *listen, char *err, size_t errlen);
void egd_proxy_stop(egd_t *d);
/* Closes a sandbox's live connections whose name its rules no longer
 * allow (all of them when s is being dropped): how many. */
unsigned egd_proxy_recheck(egd_t *d, egd_sandbox_t *s, bool all);

/* udp.c */
int egd_udp_start(egd_t *d, const char *listen, char *err, size_t errlen);
void egd_udp_stop(egd_t *d);
/* Ends a sandbox's UDP flows its rules no longer allow (all when s is
 * being dropped) and forgets its refused ones: how many allowed ones. */
unsigned egd_udp_recheck(egd_t *d, egd_sandbox_t *s, bool all);

/* tls.c: secrets at egress */
typedef struct ssl_st SSL;
struct egd_tls;
/* The contexts; upstream_ca: the CAs a bound host's certificate must chain
 * to (a PEM file; NULL: the system's). */
int egd_tls_init(const char *upstream_ca, char *err, size_t errlen);
void egd_tls_cleanup(void);
/* A set's "ca" {cert, key} and "secrets" [{header, value, hosts}] into
 * *ret (NULL when neither is given); -1 with why. */
int egd_tls_parse(json_object *ca, json_object *secrets, struct egd_tls **ret, char *why, size_t whylen);
void egd_tls_free(struct egd_tls *t);   /* wipes the secrets */
/* The headers of the secrets bound to name (into out, at most max). */
size_t egd_tls_headers(const struct egd_tls *t, const char *name, egress_header_t *out, size_t max);
/* A server side for name with a certificate from t's CA; a client side
 * verifying name. NULL when out of memory. */
SSL *egd_tls_server(struct egd_tls *t, const char *name);
SSL *egd_tls_client(const char *name);

/* control.c */
int egd_control_start(egd_t *d, const char *path, char *err, size_t errlen);
void egd_control_stop(egd_t *d);

#endif
