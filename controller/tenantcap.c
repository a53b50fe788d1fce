/* Fair shares on one controller: per-tenant counts of open streams (see
 * tenantcap.h). One table for the process, under one mutex: a take or a
 * release is a hash lookup; an entry lives while its tenant holds
 * something, so the table is bounded by the streams open. */
#include "tenantcap.h"
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCAP_BUCKETS 256

typedef struct tcap_entry {
    char tenant[SBX_ID_MAX];
    int64_t count[TCAP__COUNT];
    struct tcap_entry *next;
} tcap_entry_t;

static pthread_mutex_t tcap_mu = PTHREAD_MUTEX_INITIALIZER;
static tcap_entry_t *tcap_table[TCAP_BUCKETS];
static pthread_once_t tcap_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *tcap_m_refused, *tcap_m_held;
static int64_t tcap_held[TCAP__COUNT]; /* over every tenant; the lock held */

static const struct {
    const char *setting, *policy, *what, *label;
    cfg_key_t key;
} tcap_kinds[TCAP__COUNT] = {
    [TCAP_TRANSFERS] = { "tenant_max_transfers", "max_transfers", "file transfers and shells", "transfers",
                         CFG_TENANT_MAX_TRANSFERS },
    [TCAP_SHELLS] = { "tenant_max_shells", "max_shells", "shells", "shells", CFG_TENANT_MAX_SHELLS },
    [TCAP_LOG_STREAMS] = { "tenant_max_log_streams", "max_log_streams", "log streams", "log_streams",
                           CFG_TENANT_MAX_LOG_STREAMS },
    [TCAP_WORKER_CONNS] = { "tenant_max_worker_connections", "max_worker_connections",
                            "connections to workers (routes, logs, files, shells)", "worker_connections",
                            CFG_TENANT_MAX_WORKER_CONNECTIONS },
};

static void tcap_metrics_init(void)
{
    tcap_m_refused = metrics_family("sandbox_tenant_cap_refused_total", METRIC_COUNTER,
                                    "Streams refused because their tenant held its share of this controller "
                                    "already (429 quota_exceeded), by kind: transfers, shells, log_streams, "
                                    "worker_connections.",
                                    NULL, 0);
    tcap_m_held = metrics_family("sandbox_tenant_streams", METRIC_GAUGE,
                                 "Streams this controller holds open for tenants now, summed over tenants, by "
                                 "kind (what the tenant_max_* caps count): transfers, shells, log_streams, "
                                 "worker_connections.",
                                 NULL, 0);
}

/* The gauge of kind k after a change; the lock held. */
static void tcap_held_add(int k, int64_t d)
{
    tcap_held[k] += d;
    char labels[64];
    metrics_set(tcap_m_held, metrics_labels(labels, sizeof labels, "kind", tcap_kinds[k].label, NULL),
                (double)tcap_held[k]);
}

const char *tenantcap_setting_name(tcap_kind_t k) { return k < TCAP__COUNT ? tcap_kinds[k].setting : "?"; }
const char *tenantcap_policy_name(tcap_kind_t k) { return k < TCAP__COUNT ? tcap_kinds[k].policy : "?"; }
const char *tenantcap_what(tcap_kind_t k) { return k < TCAP__COUNT ? tcap_kinds[k].what : "?"; }

void tenantcap_limits(const cfg_t *cfg, const policy_t *p, tenantcap_limits_t *ret)
{
    const int64_t pol[TCAP__COUNT] = {
        [TCAP_TRANSFERS] = p ? p->max_transfers : 0,
        [TCAP_SHELLS] = p ? p->max_shells : 0,
        [TCAP_LOG_STREAMS] = p ? p->max_log_streams : 0,
        [TCAP_WORKER_CONNS] = p ? p->max_worker_connections : 0,
    };
    for (int k = 0; k < TCAP__COUNT; k++)
        ret->max[k] = policy_tighter(cfg_int(cfg, tcap_kinds[k].key), pol[k]);
}

static unsigned tcap_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % TCAP_BUCKETS;
}

/* The tenant's entry (made when create); the lock held. */
static tcap_entry_t *tcap_find(const char *tenant, bool create)
{
    tcap_entry_t **pp = &tcap_table[tcap_hash(tenant)];
    for (; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->tenant, tenant) == 0)
            return *pp;
    if (!create)
        return NULL;
    tcap_entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
    *pp = e;
    return e;
}

/* Frees the tenant's entry when it holds nothing; the lock held. */
static void tcap_forget_if_empty(const char *tenant)
{
    tcap_entry_t **pp = &tcap_table[tcap_hash(tenant)];
    for (; *pp; pp = &(*pp)->next) {
        tcap_entry_t *e = *pp;
        if (strcmp(e->tenant, tenant) != 0)
            continue;
        for (int k = 0; k < TCAP__COUNT; k++)
            if (e->count[k] > 0)
                return;
        *pp = e->next;
        free(e);
        return;
    }
}

int tenantcap_add(tenantcap_hold_t *h, unsigned kinds, const tenantcap_limits_t *lim, tcap_kind_t *ret_over)
{
    pthread_once(&tcap_metrics_once, tcap_metrics_init);
    kinds &= ~h->kinds;
    if (kinds == 0 || !h->tenant[0])
        return 0;
    int rc = 0;
    pthread_mutex_lock(&tcap_mu);
    tcap_entry_t *e = tcap_find(h->tenant, true);
    if (!e) {
        /* out of memory: the stream goes on uncounted rather than failing */
        pthread_mutex_unlock(&tcap_mu);
        return 0;
    }
    for (int k = 0; k < TCAP__COUNT && rc == 0; k++)
        if ((kinds & TCAP_BIT(k)) && lim->max[k] > 0 && e->count[k] >= lim->max[k]) {
            rc = SBX_ETOOBIG;
            if (ret_over)
                *ret_over = (tcap_kind_t)k;
            char labels[64];
            metrics_add(tcap_m_refused, metrics_labels(labels, sizeof labels, "kind", tcap_kinds[k].label, NULL), 1);
        }
    if (rc == 0) {
        for (int k = 0; k < TCAP__COUNT; k++)
            if (kinds & TCAP_BIT(k)) {
                e->count[k]++;
                tcap_held_add(k, 1);
            }
        h->kinds |= kinds;
    } else {
        tcap_forget_if_empty(h->tenant);
    }
    pthread_mutex_unlock(&tcap_mu);
    return rc;
}

int tenantcap_take(tenantcap_hold_t *h, const char *tenant, unsigned kinds, const tenantcap_limits_t *lim,
                   tcap_kind_t *ret_over)
{
    tenantcap_release(h);
    snprintf(h->tenant, sizeof h->tenant, "%s", tenant ? tenant : "");
    h->kinds = 0;
    return tenantcap_add(h, kinds, lim, ret_over);
}

void tenantcap_release(tenantcap_hold_t *h)
{
    if (!h || h->kinds == 0)
        return;
    pthread_mutex_lock(&tcap_mu);
    tcap_entry_t *e = tcap_find(h->tenant, false);
    for (int k = 0; e && k < TCAP__COUNT; k++)
        if ((h->kinds & TCAP_BIT(k)) && e->count[k] > 0) {
            e->count[k]--;
            tcap_held_add(k, -1);
        }
    if (e)
        tcap_forget_if_empty(h->tenant);
    pthread_mutex_unlock(&tcap_mu);
    h->kinds = 0;
}

int64_t tenantcap_count(const char *tenant, tcap_kind_t k)
{
    if (k >= TCAP__COUNT)
        return 0;
    pthread_mutex_lock(&tcap_mu);
    tcap_entry_t *e = tcap_find(tenant, false);
    int64_t n = e ? e->count[k] : 0;
    pthread_mutex_unlock(&tcap_mu);
    return n;
}

void tenantcap_message(const tenantcap_limits_t *lim, tcap_kind_t k, char *out, size_t outlen)
{
    snprintf(out, outlen,
             "the tenant holds %lld %s on this controller already, its share (%s, or the tenant policy's %s); "
             "close one or retry later",
             (long long)lim->max[k], tenantcap_what(k), tenantcap_setting_name(k), tenantcap_policy_name(k));
}
