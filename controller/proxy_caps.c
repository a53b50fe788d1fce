/* The route listener's connection caps, shared by every HTTP thread's
 * proxy (see proxy_internal.h): route_max_connections over the whole
 * listener and route_max_connections_per_address per client address (the
 * TCP peer, an IPv6 /64; trusted_proxies are exempt). Over a cap, the
 * oldest evictable connection (no complete request head yet, or our own
 * answer flushing) makes room for the new one; only when there is none is
 * the new one answered 503. A victim on another thread is freed by that
 * thread (its evict event, activated here). One mutex guards the list of
 * connections, their counts and the evictable/evicting flags. */
#include "proxy_internal.h"
#include "log.h"
#include "metrics.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/queue.h>
#include <time.h>

struct proxy_addr {
    unsigned char key[16];   /* IPv4 as ::ffff:a.b.c.d, IPv6 masked to /64 */
    int count;
    struct proxy_addr *next;
};

static pthread_mutex_t caps_lock = PTHREAD_MUTEX_INITIALIZER;
static TAILQ_HEAD(, pconn) caps_conns = TAILQ_HEAD_INITIALIZER(caps_conns);
static int caps_total;
static struct proxy_addr *caps_buckets[SBX_ROUTE_ADDR_BUCKETS];

static metric_family_t *m_shed;
static pthread_once_t caps_metrics_once = PTHREAD_ONCE_INIT;

static void caps_metrics_init(void)
{
    m_shed = metrics_family("sandbox_route_connections_shed_total", METRIC_COUNTER,
                            "Route connections shed over a cap: action \"evicted\" (an idle one made room) or "
                            "\"refused\" (503, none was idle); cap \"listener\" (route_max_connections) or "
                            "\"address\" (route_max_connections_per_address).",
                            NULL, 0);
}

static void addr_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
    memset(key, 0, 16);
    if (ss->ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        memcpy(key, a, 16);
        if (!IN6_IS_ADDR_V4MAPPED(a))
            memset(key + 8, 0, 8);
    }
}

static unsigned addr_hash(const unsigned char key[16])
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % SBX_ROUTE_ADDR_BUCKETS;
}

/* The count of pc's address, made at 0 when new; NULL when out of memory
 * (the connection then counts only against the listener's cap). */
static struct proxy_addr *addr_get(const unsigned char key[16])
{
    unsigned b = addr_hash(key);
    for (struct proxy_addr *a = caps_buckets[b]; a; a = a->next)
        if (memcmp(a->key, key, 16) == 0)
            return a;
    struct proxy_addr *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    memcpy(a->key, key, 16);
    a->next = caps_buckets[b];
    caps_buckets[b] = a;
    return a;
}

static void addr_put(struct proxy_addr *a)
{
    if (--a->count > 0)
        return;
    struct proxy_addr **pp = &caps_buckets[addr_hash(a->key)];
    while (*pp && *pp != a)
        pp = &(*pp)->next;
    if (*pp)
        *pp = a->next;
    free(a);
}

/* The oldest evictable connection (of address a, unless NULL). */
static pconn_t *oldest_evictable(const struct proxy_addr *a)
{
    pconn_t *pc;
    TAILQ_FOREACH(pc, &caps_conns, glink)
        if (pc->evictable && !pc->evicting && (!a || pc->addr == a))
            return pc;
    return NULL;
}

/* At most one line a second per kind: true when one may be logged now,
 * with *ret_n the lines not logged since the last. */
static bool log_due(atomic_llong *last, atomic_long *suppressed, long *ret_n)
{
    long long now = (long long)time(NULL), prev = atomic_load(last);
    if (now == prev || !atomic_compare_exchange_strong(last, &prev, now)) {
        atomic_fetch_add(suppressed, 1);
        return false;
    }
    *ret_n = atomic_exchange(suppressed, 0);
    return true;
}

static void shed_log(atomic_llong *last, atomic_long *suppressed, const char *what)
{
    long n = 0;
    if (log_due(last, suppressed, &n))
        log_warn("proxy", "route listener: %s (%ld more since the last such line)", what, n);
}

proxy_admit_t proxy_caps_admit(pconn_t *pc, pconn_t **ret_victim)
{
    static atomic_llong last_evict, last_refuse;
    static atomic_long n_evict, n_refuse;
    pthread_once(&caps_metrics_once, caps_metrics_init);
    controller_t *ctl = pc->pt->ctl;
    *ret_victim = NULL;
    pthread_mutex_lock(&caps_lock);
    TAILQ_INSERT_TAIL(&caps_conns, pc, glink);
    pc->registered = true;
    caps_total++;
    pc->evictable = true;
    if (!pc->trusted_peer && ctl->route_max_conns_per_addr > 0) {
        unsigned char key[16];
        addr_key(&pc->peer, key);
        if ((pc->addr = addr_get(key)))
            pc->addr->count++;
    }
    proxy_admit_t res = PROXY_ADMIT_OK;
    const char *cap = NULL;
    pconn_t *victim = NULL;
    if (pc->addr && pc->addr->count > ctl->route_max_conns_per_addr) {
        cap = "address";
        victim = oldest_evictable(pc->addr);
        if (!victim || victim == pc)
            res = PROXY_ADMIT_ADDRESS_FULL;
    } else if (caps_total > ctl->route_max_conns) {
        cap = "listener";
        victim = oldest_evictable(NULL);
        if (!victim || victim == pc)
            res = PROXY_ADMIT_FULL;
    }
    if (res != PROXY_ADMIT_OK) {
        victim = NULL;
    } else if (victim) {
        victim->evicting = true;
        victim->evictable = false;
        if (victim->pt == pc->pt)
            *ret_victim = victim;
        else
            event_active(victim->evict_ev, EV_TIMEOUT, 1);
    }
    pthread_mutex_unlock(&caps_lock);
    if (cap) {
        char labels[64];
        metrics_add(m_shed, metrics_labels(labels, sizeof labels, "action", victim ? "evicted" : "refused", "cap",
                                           cap, NULL), 1);
        if (victim)
            shed_log(&last_evict, &n_evict,
                     strcmp(cap, "address") == 0
                         ? "a client address is at route_max_connections_per_address: evicting its oldest idle "
                           "connection"
                         : "route_max_connections reached: evicting the oldest idle connection");
        else
            shed_log(&last_refuse, &n_refuse,
                     strcmp(cap, "address") == 0
                         ? "a client address is at route_max_connections_per_address with none idle: 503"
                         : "route_max_connections reached with none idle: 503");
    }
    return res;
}

bool proxy_caps_claim(pconn_t *pc)
{
    pthread_mutex_lock(&caps_lock);
    bool ok = !pc->evicting;
    if (ok)
        pc->evictable = false;
    pthread_mutex_unlock(&caps_lock);
    return ok;
}

void proxy_caps_release(pconn_t *pc)
{
    pthread_mutex_lock(&caps_lock);
    if (!pc->evicting)
        pc->evictable = true;
    pthread_mutex_unlock(&caps_lock);
}

void proxy_caps_remove(pconn_t *pc)
{
    pthread_mutex_lock(&caps_lock);
    if (pc->registered) {
        TAILQ_REMOVE(&caps_conns, pc, glink);
        caps_total--;
        if (pc->addr)
            addr_put(pc->addr);
        pc->addr = NULL;
        pc->registered = false;
    }
    pthread_mutex_unlock(&caps_lock);
}

void proxy_caps_fit_fds(controller_t *ctl)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    long long fit = ((long long)rl.rlim_cur - SBX_ROUTE_FD_RESERVE) / 2;
    if (fit < 1)
        fit = 1;
    if (fit >= ctl->route_max_conns)
        return;
    log_warn("proxy", "route listener: serving at most %lld connections, not route_max_connections %d: the "
                      "open files limit (RLIMIT_NOFILE) is %llu, a relayed connection holds two and %d are kept "
                      "for the rest; raise it (ulimit -n, LimitNOFILE=) to serve more",
             fit, ctl->route_max_conns, (unsigned long long)rl.rlim_cur, SBX_ROUTE_FD_RESERVE);
    ctl->route_max_conns = (int)fit;
}

void proxy_accept_error_cb(struct evconnlistener *l, void *arg)
{
    static atomic_llong last_log;
    static atomic_long suppressed;
    proxy_thread_t *pt = arg;
    int err = EVUTIL_SOCKET_ERROR();
    /* Whatever the error, accepting again at once would fail the same way
     * as fast as the loop spins: pause, then try again. */
    evconnlistener_disable(l);
    struct timeval tv = { 0, SBX_ROUTE_ACCEPT_BACKOFF_MS * 1000 };
    if (!pt->resume || evtimer_add(pt->resume, &tv) < 0)
        evconnlistener_enable(l);
    long n = 0;
    if (!log_due(&last_log, &suppressed, &n))
        return;
    log_warn("proxy", "route listener: accept failed: %s; not accepting for %d ms (%ld more since the last such "
                      "line)",
             evutil_socket_error_to_string(err), SBX_ROUTE_ACCEPT_BACKOFF_MS, n);
}

void proxy_accept_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    proxy_thread_t *pt = arg;
    if (pt->listener)
        evconnlistener_enable(pt->listener);
}
