/* Connection caps shared by a listener's threads (see conncap.h). */
#include "conncap.h"
#include "errors.h"
#include "limits.h"
#include "log.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

struct conncap_addr {
    unsigned char key[16];   /* IPv4 as ::ffff:a.b.c.d, IPv6 masked to /64 */
    int count;
    struct conncap_addr *next;
};

int conncap_init(conncap_t *cap, const char *name, const char *max_setting, const char *per_addr_setting, int max,
                 int max_per_addr, metric_family_t *m_shed)
{
    memset(cap, 0, sizeof *cap);
    cap->buckets = calloc(SBX_CONNCAP_ADDR_BUCKETS, sizeof *cap->buckets);
    if (!cap->buckets)
        return SBX_ENOMEM;
    cap->name = name;
    cap->max_setting = max_setting;
    cap->per_addr_setting = per_addr_setting;
    cap->max = max;
    cap->max_per_addr = max_per_addr;
    cap->m_shed = m_shed;
    pthread_mutex_init(&cap->lock, NULL);
    TAILQ_INIT(&cap->conns);
    return 0;
}

void conncap_destroy(conncap_t *cap)
{
    if (!cap->buckets)
        return;
    for (int i = 0; i < SBX_CONNCAP_ADDR_BUCKETS; i++)
        while (cap->buckets[i]) {
            struct conncap_addr *a = cap->buckets[i];
            cap->buckets[i] = a->next;
            free(a);
        }
    free(cap->buckets);
    cap->buckets = NULL;
    pthread_mutex_destroy(&cap->lock);
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
    return h % SBX_CONNCAP_ADDR_BUCKETS;
}

/* The count of an address, made at 0 when new; NULL when out of memory
 * (the connection then counts only against the listener's cap). */
static struct conncap_addr *addr_get(conncap_t *cap, const unsigned char key[16])
{
    unsigned b = addr_hash(key);
    for (struct conncap_addr *a = cap->buckets[b]; a; a = a->next)
        if (memcmp(a->key, key, 16) == 0)
            return a;
    struct conncap_addr *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    memcpy(a->key, key, 16);
    a->next = cap->buckets[b];
    cap->buckets[b] = a;
    return a;
}

static void addr_put(conncap_t *cap, struct conncap_addr *a)
{
    if (--a->count > 0)
        return;
    struct conncap_addr **pp = &cap->buckets[addr_hash(a->key)];
    while (*pp && *pp != a)
        pp = &(*pp)->next;
    if (*pp)
        *pp = a->next;
    free(a);
}

/* The oldest evictable connection (of address a, unless NULL). */
static conncap_entry_t *oldest_evictable(conncap_t *cap, const struct conncap_addr *a)
{
    conncap_entry_t *e;
    TAILQ_FOREACH(e, &cap->conns, glink)
        if (e->evictable && !e->evicting && (!a || e->addr == a))
            return e;
    return NULL;
}

bool conncap_log_due(atomic_llong *last, atomic_long *suppressed, long *ret_n)
{
    long long now = (long long)time(NULL), prev = atomic_load(last);
    if (now == prev || !atomic_compare_exchange_strong(last, &prev, now)) {
        atomic_fetch_add(suppressed, 1);
        return false;
    }
    *ret_n = atomic_exchange(suppressed, 0);
    return true;
}

static void shed_note(conncap_t *cap, bool address, bool evicted)
{
    if (cap->m_shed) {
        char labels[64];
        metrics_add(cap->m_shed, metrics_labels(labels, sizeof labels, "action", evicted ? "evicted" : "refused",
                                                "cap", address ? "address" : "listener", NULL), 1);
    }
    long n = 0;
    if (!conncap_log_due(evicted ? &cap->last_evict_log : &cap->last_refuse_log,
                         evicted ? &cap->n_evict_log : &cap->n_refuse_log, &n))
        return;
    const char *setting = address ? cap->per_addr_setting : cap->max_setting;
    if (evicted)
        log_warn("conncap", "%s: %s reached%s: evicting the oldest idle connection (%ld more since the last such line)",
                 cap->name, setting, address ? " for a client address" : "", n);
    else
        log_warn("conncap", "%s: %s reached%s with none idle: refused (%ld more since the last such line)", cap->name,
                 setting, address ? " for a client address" : "", n);
}

conncap_admit_t conncap_admit(conncap_t *cap, conncap_entry_t *e, const struct sockaddr_storage *peer, bool exempt,
                              void (*evict)(conncap_entry_t *victim, void *arg), void *arg)
{
    pthread_mutex_lock(&cap->lock);
    TAILQ_INSERT_TAIL(&cap->conns, e, glink);
    e->registered = true;
    e->evictable = true;
    e->evicting = false;
    e->addr = NULL;
    cap->total++;
    if (!exempt && cap->max_per_addr > 0) {
        unsigned char key[16];
        addr_key(peer, key);
        if ((e->addr = addr_get(cap, key)))
            e->addr->count++;
    }
    conncap_admit_t res = CONNCAP_OK;
    bool over = false, address = false;
    conncap_entry_t *victim = NULL;
    if (e->addr && e->addr->count > cap->max_per_addr) {
        over = address = true;
        victim = oldest_evictable(cap, e->addr);
        if (!victim || victim == e)
            res = CONNCAP_ADDRESS_FULL;
    } else if (cap->total > cap->max) {
        over = true;
        victim = oldest_evictable(cap, NULL);
        if (!victim || victim == e)
            res = CONNCAP_FULL;
    }
    if (res != CONNCAP_OK) {
        victim = NULL;
    } else if (victim) {
        victim->evicting = true;
        victim->evictable = false;
        evict(victim, arg);
    }
    pthread_mutex_unlock(&cap->lock);
    if (over)
        shed_note(cap, address, victim != NULL);
    return res;
}

bool conncap_claim(conncap_t *cap, conncap_entry_t *e)
{
    pthread_mutex_lock(&cap->lock);
    bool ok = !e->evicting;
    if (ok)
        e->evictable = false;
    pthread_mutex_unlock(&cap->lock);
    return ok;
}

void conncap_release(conncap_t *cap, conncap_entry_t *e)
{
    pthread_mutex_lock(&cap->lock);
    if (!e->evicting)
        e->evictable = true;
    pthread_mutex_unlock(&cap->lock);
}

void conncap_remove(conncap_t *cap, conncap_entry_t *e)
{
    pthread_mutex_lock(&cap->lock);
    if (e->registered) {
        TAILQ_REMOVE(&cap->conns, e, glink);
        cap->total--;
        if (e->addr)
            addr_put(cap, e->addr);
        e->addr = NULL;
        e->registered = false;
    }
    pthread_mutex_unlock(&cap->lock);
}

void conncap_locked(conncap_t *cap, conncap_entry_t *e, void (*fn)(conncap_entry_t *e, void *arg), void *arg)
{
    pthread_mutex_lock(&cap->lock);
    fn(e, arg);
    pthread_mutex_unlock(&cap->lock);
}

long long conncap_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return -1;
    return (long long)rl.rlim_cur;
}
