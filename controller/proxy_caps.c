/* The route listener's connection caps, shared by every HTTP thread's
 * proxy (see proxy_internal.h), on controller/conncap.c:
 * route_max_connections over the whole listener and
 * route_max_connections_per_address per client address (trusted_proxies
 * are exempt). Over a cap, the oldest evictable connection (no complete
 * request head yet, or our own answer flushing) makes room for the new
 * one; only when there is none is the new one answered 503. A victim on
 * another thread is freed by that thread (its evict event, activated
 * here). */
#include "proxy_internal.h"
#include "log.h"
#include "metrics.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static conncap_t route_caps;
static bool route_caps_ready;

#define PC_OF(e) ((pconn_t *)((char *)(e) - offsetof(pconn_t, cap)))

int proxy_caps_init(controller_t *ctl)
{
    long long nofile = conncap_nofile();
    long long fit = nofile < 0 ? ctl->route_max_conns : (nofile - SBX_ROUTE_FD_RESERVE) / 2;
    if (fit < 1)
        fit = 1;
    if (fit < ctl->route_max_conns) {
        log_warn("proxy", "route listener: serving at most %lld connections, not route_max_connections %d: the "
                          "open files limit (RLIMIT_NOFILE) is %lld, a relayed connection holds two and %d are kept "
                          "for the rest; raise it (ulimit -n, LimitNOFILE=) to serve more",
                 fit, ctl->route_max_conns, nofile, SBX_ROUTE_FD_RESERVE);
        ctl->route_max_conns = (int)fit;
    }
    if (route_caps_ready) {
        route_caps.max = ctl->route_max_conns;
        route_caps.max_per_addr = ctl->route_max_conns_per_addr;
        return 0;
    }
    metric_family_t *shed = metrics_family("sandbox_route_connections_shed_total", METRIC_COUNTER,
                                           "Route connections shed over a cap: action \"evicted\" (an idle one made "
                                           "room) or \"refused\" (503, none was idle); cap \"listener\" "
                                           "(route_max_connections) or \"address\" "
                                           "(route_max_connections_per_address).",
                                           NULL, 0);
    if (conncap_init(&route_caps, "route listener", "route_max_connections", "route_max_connections_per_address",
                     ctl->route_max_conns, ctl->route_max_conns_per_addr, shed) < 0)
        return SBX_ENOMEM;
    route_caps_ready = true;
    return 0;
}

typedef struct {
    proxy_thread_t *pt;
    pconn_t *victim;           /* on pt's thread: the caller frees it */
} evict_arg_t;

static void evict_locked(conncap_entry_t *e, void *arg)
{
    evict_arg_t *ea = arg;
    pconn_t *victim = PC_OF(e);
    if (victim->pt == ea->pt)
        ea->victim = victim;
    else
        event_active(victim->evict_ev, EV_TIMEOUT, 1);
}

proxy_admit_t proxy_caps_admit(pconn_t *pc, pconn_t **ret_victim)
{
    evict_arg_t ea = { pc->pt, NULL };
    conncap_admit_t res = conncap_admit(&route_caps, &pc->cap, &pc->peer, pc->trusted_peer, evict_locked, &ea);
    *ret_victim = ea.victim;
    return res == CONNCAP_OK ? PROXY_ADMIT_OK : res == CONNCAP_FULL ? PROXY_ADMIT_FULL : PROXY_ADMIT_ADDRESS_FULL;
}

bool proxy_caps_claim(pconn_t *pc) { return conncap_claim(&route_caps, &pc->cap); }

void proxy_caps_release(pconn_t *pc) { conncap_release(&route_caps, &pc->cap); }

void proxy_caps_remove(pconn_t *pc)
{
    if (route_caps_ready)
        conncap_remove(&route_caps, &pc->cap);
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
    if (!conncap_log_due(&last_log, &suppressed, &n))
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
