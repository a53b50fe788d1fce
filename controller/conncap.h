/* Connection caps for a listener served by several threads: one over the
 * whole listener and one per client address (the TCP peer, an IPv6 /64).
 * Over a cap the oldest evictable connection (of that address, or of the
 * listener) makes room for the new one; only when there is none is the new
 * one refused. The route listener (controller/proxy_caps.c) and the API
 * listener (controller/apiconn.c) each have one table. One mutex guards a
 * table's list, its counts and its entries' flags. */
#ifndef SBX_CONNCAP_H
#define SBX_CONNCAP_H

#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/queue.h>
#include <sys/socket.h>

struct conncap_addr;

/* One connection's place in a table: embedded in the caller's struct. */
typedef struct conncap_entry {
    struct conncap_addr *addr;   /* its address's count; NULL when exempt */
    bool registered;             /* counted against the caps */
    bool evictable;              /* idle: may make room for a new connection */
    bool evicting;               /* chosen to make room; its owner closes it */
    TAILQ_ENTRY(conncap_entry) glink; /* the table's, oldest first */
} conncap_entry_t;

typedef struct conncap {
    const char *name;            /* for the log: "route listener", "API listener" */
    const char *max_setting;     /* the settings' names, for the log */
    const char *per_addr_setting;
    int max;                     /* connections over the listener */
    int max_per_addr;            /* 0: no per-address cap */
    metric_family_t *m_shed;     /* labels action (evicted|refused), cap (listener|address) */
    pthread_mutex_t lock;
    TAILQ_HEAD(, conncap_entry) conns;
    int total;
    struct conncap_addr **buckets;
    atomic_llong last_evict_log, last_refuse_log;
    atomic_long n_evict_log, n_refuse_log;
} conncap_t;

typedef enum {
    CONNCAP_OK,                  /* served (perhaps an idle one was evicted for it) */
    CONNCAP_FULL,                /* the listener's cap, none evictable */
    CONNCAP_ADDRESS_FULL,        /* the address's cap, none of its own evictable */
} conncap_admit_t;

/* Sets up cap (name and settings for the log, m_shed may be NULL); < 0
 * when out of memory. */
int conncap_init(conncap_t *cap, const char *name, const char *max_setting, const char *per_addr_setting, int max,
                 int max_per_addr, metric_family_t *m_shed);
void conncap_destroy(conncap_t *cap);

/* Counts a new connection from peer (exempt: no per-address cap) against
 * the caps; it stays counted until conncap_remove, whatever the answer, and
 * starts evictable. Over a cap the oldest evictable connection is chosen
 * (marked evicting) and evict(victim, arg) is called with the lock held, so
 * the victim cannot go away meanwhile: it must not call back into cap. */
conncap_admit_t conncap_admit(conncap_t *cap, conncap_entry_t *e, const struct sockaddr_storage *peer, bool exempt,
                              void (*evict)(conncap_entry_t *victim, void *arg), void *arg);
/* A request is in progress: e is no longer evictable. False when it was
 * already chosen to make room. */
bool conncap_claim(conncap_t *cap, conncap_entry_t *e);
/* e is idle again: evictable (unless it is being evicted). */
void conncap_release(conncap_t *cap, conncap_entry_t *e);
/* e no longer counts (its connection is closing). */
void conncap_remove(conncap_t *cap, conncap_entry_t *e);
/* Runs fn(e, arg) with the lock held: e's flags cannot change meanwhile
 * and, since its owner removes it before closing, it is still open when
 * registered. */
void conncap_locked(conncap_t *cap, conncap_entry_t *e, void (*fn)(conncap_entry_t *e, void *arg), void *arg);

/* At most one line a second per kind: true when one may be logged now,
 * with *ret_n the lines not logged since the last. */
bool conncap_log_due(atomic_llong *last, atomic_long *suppressed, long *ret_n);

/* The open files limit (RLIMIT_NOFILE) as it is, or -1 when unlimited or
 * unknown. */
long long conncap_nofile(void);

#endif
