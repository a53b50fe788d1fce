/* The reconcile loop thread. It looks at the tables, never at events, so a
 * lost wake-up only delays work until the next tick. */
#include "reconcile.h"
#include "db.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct reconcile {
    controller_t *ctl;
    PGconn *db;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool kicked;
    bool stop;
    bool db_down_logged;
    /* Since when this loop has seen the database answer without a break.
     * While the database (or this controller) was away, no heartbeat could
     * be recorded: workers are not blamed for that. */
    int64_t healthy_since_ms;
    /* Some worker was heard since healthy_since_ms: the way from workers to
     * the database works again, so a silence now is the worker's own. */
    bool heard_since_healthy;
    int64_t next_prune_ms;      /* monotonic time of the next retention pass */
    double pool_tokens;         /* warm pool members the refill pass may still add (pool_refill_per_second) */
    int64_t pool_tokens_ms;     /* when pool_tokens was last topped up */
    int64_t next_timed_ms;      /* monotonic time the clock-driven passes are due again */
    int64_t next_refill_ms;     /* monotonic time the pool refill pass is due again */
    bool pools_short;           /* the last refill pass added members: refill again in SBX_POOL_REFILL_TICK_MS */
};

static metric_family_t *m_pass_seconds, *m_pass_rows, *m_pass_errors, *m_round_seconds, *m_pruned;

static void reconcile_metrics_init(void)
{
    m_pass_seconds = metrics_family("sandbox_reconcile_pass_duration_seconds", METRIC_HISTOGRAM,
                                    "Time one reconcile pass took, by pass.", metrics_latency_buckets,
                                    metrics_latency_nbuckets);
    m_pass_rows = metrics_family("sandbox_reconcile_rows_total", METRIC_COUNTER,
                                 "Rows (operations, sandboxes, workers, routes) reconcile passes changed, by pass.",
                                 NULL, 0);
    m_pass_errors = metrics_family("sandbox_reconcile_errors_total", METRIC_COUNTER,
                                   "Reconcile passes that failed (database errors), by pass.", NULL, 0);
    m_round_seconds = metrics_family("sandbox_reconcile_round_duration_seconds", METRIC_HISTOGRAM,
                                     "Time one reconcile round (every pass until nothing moves) took.",
                                     metrics_latency_buckets, metrics_latency_nbuckets);
    m_pruned = metrics_family("sandbox_retention_pruned_total", METRIC_COUNTER,
                              "Rows the retention loop deleted, by table.", NULL, 0);
}

/* Records one pass: its time, the rows it changed, a failure. */
static void pass_done(const char *pass, int64_t t0_ms, int rows, int rc)
{
    char labels[64];
    metrics_labels(labels, sizeof labels, "pass", pass, NULL);
    metrics_observe(m_pass_seconds, labels, (double)(time_mono_ms() - t0_ms) / 1000.0);
    if (rows > 0)
        metrics_add(m_pass_rows, labels, rows);
    if (rc < 0)
        metrics_add(m_pass_errors, labels, 1);
}

/* Runs `call` (which adds to `changed`) as pass `name` unless a pass failed. */
#define RUN_PASS(name, call)                                                                                         \
    do {                                                                                                             \
        if (rc >= 0) {                                                                                               \
            int64_t t0_ = time_mono_ms();                                                                            \
            int before_ = changed;                                                                                   \
            rc = (call);                                                                                             \
            pass_done(name, t0_, changed - before_, rc);                                                             \
        }                                                                                                            \
    } while (0)

/* Retention, every retention_interval_seconds: batched deletes of old
 * events, finished operations and deleted sandboxes. */
static int retention_pass(struct reconcile *r)
{
    const cfg_t *cfg = &r->ctl->cfg;
    int64_t now = time_mono_ms();
    if (now < r->next_prune_ms)
        return 0;
    r->next_prune_ms = now + cfg_int(cfg, CFG_RETENTION_INTERVAL_SECONDS) * 1000;
    store_pruned_t p;
    int rc = store_prune(r->db, cfg_int(cfg, CFG_RETENTION_OPERATIONS_SECONDS),
                         cfg_int(cfg, CFG_RETENTION_EVENTS_SECONDS), &p);
    pass_done("retention", now, (int)(p.events + p.operations + p.sandboxes + p.routes + p.builds + p.network_log),
              rc);
    metrics_add(m_pruned, "table=\"events\"", (double)p.events);
    metrics_add(m_pruned, "table=\"operations\"", (double)p.operations);
    metrics_add(m_pruned, "table=\"sandboxes\"", (double)p.sandboxes);
    metrics_add(m_pruned, "table=\"routes\"", (double)p.routes);
    metrics_add(m_pruned, "table=\"template_builds\"", (double)p.builds);
    metrics_add(m_pruned, "table=\"network_log\"", (double)p.network_log);
    if (p.events || p.operations || p.sandboxes || p.routes || p.builds || p.network_log)
        log_info("retention", "pruned %lld events, %lld operations, %lld sandboxes, %lld routes, %lld template builds "
                 "and %lld network log entries", p.events, p.operations, p.sandboxes, p.routes, p.builds,
                 p.network_log);
    long long corrected = 0;
    if (rc >= 0 && (rc = store_usage_check(r->db, &corrected)) >= 0 && corrected > 0)
        log_warn("retention", "the live counters differed from a recount for %lld tenant/worker keys; corrected",
                 corrected);
    if (rc < 0)
        r->next_prune_ms = now; /* try again next tick */
    return rc;
}

/* The warm pools' refill, bounded to pool_refill_per_second members (a
 * bucket holding at most one second's worth). */
static int pool_refill_pass(struct reconcile *r, int *changed)
{
    double rate = (double)cfg_int(&r->ctl->cfg, CFG_POOL_REFILL_PER_SECOND);
    int64_t now = time_mono_ms();
    r->pool_tokens += rate * (double)(now - r->pool_tokens_ms) / 1000.0;
    r->pool_tokens_ms = now;
    if (r->pool_tokens > rate)
        r->pool_tokens = rate;
    int added = 0;
    int rc = store_pool_refill(r->db, &r->ctl->lim, r->ctl->max_ttl_seconds, (int)r->pool_tokens, &added);
    r->pool_tokens -= added;
    *changed += added;
    /* Pools being drained are refilled in slices every tick, not a
     * second's worth at once: a burst of members to create and report
     * would queue the claims behind it. */
    r->pools_short = added > 0;
    r->next_refill_ms = now + SBX_POOL_REFILL_TICK_MS;
    return rc;
}

/* One round of the passes. Admission and placement run every round (a kick
 * means new operations or freed room); the passes driven by the clock or by
 * what went wrong (worker liveness, TTLs, route expiry, pool refills, lease expiry,
 * deadlines, delete retries, retention) at most once a
 * reconcile_interval_ms, so a busy controller's kicks do not run them all
 * each time. Returns rows changed, or < 0 on a database error. */
static int reconcile_pass(struct reconcile *r)
{
    controller_t *ctl = r->ctl;
    int changed = 0, leased = 0, rc = 0;
    if (db_ensure(&r->db, ctl->conninfo) < 0)
        return SBX_EDB;
    int64_t now = time_mono_ms();
    bool timed = now >= r->next_timed_ms;
    if (timed)
        r->next_timed_ms = now + cfg_int(&ctl->cfg, CFG_RECONCILE_INTERVAL_MS);
    if (!timed) {
        if (now >= r->next_refill_ms && r->pools_short)
            RUN_PASS("pool_refill", pool_refill_pass(r, &changed));
        bool pending = false, admitted = false;
        if (store_ops_waiting(r->db, &pending, &admitted) < 0)
            return SBX_EDB;
        if (pending)
            RUN_PASS("admit", store_admit_pending(r->db, &changed));
        if (pending || admitted)
            RUN_PASS("place", store_place_admitted(r->db, &ctl->lim, &changed, &leased));
        /* a build's next step as soon as its last one finished (a kick) */
        if (atomic_load(&ctl->builds_active)) {
            bool active = true;
            RUN_PASS("builds", store_builds_drive(r->db, &ctl->lim, &changed, &active));
            atomic_store(&ctl->builds_active, active);
        }
        if (changed)
            controller_wake_waiters(ctl);
        return rc < 0 ? rc : changed;
    }
    if (r->healthy_since_ms == 0)
        r->healthy_since_ms = time_mono_ms();
    int64_t healthy_ms = time_mono_ms() - r->healthy_since_ms;
    /* After an outage, give workers a worker timeout to be heard again
     * before calling them unreachable (the grace before lost then counts
     * in full from that moment), and two heartbeats to renew their leases
     * before expiring them. A worker timeout is not always enough: every
     * HTTP thread reconnects on its own back-off, and a loaded host's first
     * heartbeats after an outage were seen to take 13 s to be recorded. So
     * until some worker has been heard again (any worker: the path works),
     * silence is judged only after three worker timeouts. */
    int64_t tmo_ms = ctl->lim.worker_timeout_seconds * 1000;
    if (healthy_ms < tmo_ms)
        r->heard_since_healthy = false;
    else if (!r->heard_since_healthy && healthy_ms < 3 * tmo_ms &&
             store_worker_heard_within(r->db, healthy_ms, &r->heard_since_healthy) < 0)
        return SBX_EDB;
    bool judge_workers = healthy_ms >= tmo_ms && (r->heard_since_healthy || healthy_ms >= 3 * tmo_ms);
    bool judge_leases = healthy_ms >= ctl->lim.heartbeat_seconds * 2000;
    if (judge_workers)
        RUN_PASS("worker_liveness", store_mark_lost_workers(r->db, &ctl->lim, &changed));
    RUN_PASS("ttl", store_expire_ttls(r->db, &ctl->lim, &changed));
    RUN_PASS("route_expiry", store_expire_routes(r->db, &changed));
    RUN_PASS("pool_refill", pool_refill_pass(r, &changed));
    RUN_PASS("admit", store_admit_pending(r->db, &changed));
    RUN_PASS("place", store_place_admitted(r->db, &ctl->lim, &changed, &leased));
    if (judge_leases)
        RUN_PASS("lease_expiry", store_expire_leases(r->db, &ctl->lim, &changed));
    RUN_PASS("deadline", store_fail_overdue(r->db, &changed));
    RUN_PASS("delete_retry", store_retry_deletes(r->db, &ctl->lim, &changed));
    bool builds = true;
    RUN_PASS("builds", store_builds_drive(r->db, &ctl->lim, &changed, &builds));
    atomic_store(&ctl->builds_active, builds);
    int folded = 0; /* counters only: no sandbox changed */
    RUN_PASS("usage_fold", store_usage_fold(r->db, &folded));
    if (rc >= 0)
        rc = retention_pass(r);
    if (rc < 0) {
        if (changed)
            controller_wake_waiters(ctl);
        return rc;
    }
    if (changed)
        controller_wake_waiters(ctl);
    return changed;
}

static void *reconcile_main(void *arg)
{
    struct reconcile *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        r->kicked = false;
        pthread_mutex_unlock(&r->mu);
        int64_t t0 = time_mono_ms();
        int n;
        int rounds = 0;
        /* Drain: a pass that moved rows may have unblocked more. */
        while ((n = reconcile_pass(r)) > 0 && ++rounds < 20)
            ;
        if (n < 0) {
            r->healthy_since_ms = 0; /* restarts counting once it answers */
            if (!r->db_down_logged)
                log_warn("reconcile", "pass failed, retrying every tick: %s", db_last_error());
            r->db_down_logged = true;
        } else if (r->db_down_logged) {
            log_info("reconcile", "database reachable again");
            r->db_down_logged = false;
        }
        int64_t took = time_mono_ms() - t0;
        metrics_observe(m_round_seconds, NULL, (double)took / 1000.0);
        if (took > 1000)
            log_warn("reconcile", "a reconcile round took %lld ms", (long long)took);
        pthread_mutex_lock(&r->mu);
        if (!r->stop && !r->kicked) {
            int64_t wait_ms = cfg_int(&r->ctl->cfg, CFG_RECONCILE_INTERVAL_MS);
            int64_t refill_in = r->next_refill_ms - time_mono_ms();
            if (r->pools_short && refill_in < wait_ms)
                wait_ms = refill_in > 0 ? refill_in : 0;
            struct timespec ts = time_mono_timespec_after(wait_ms);
            while (!r->stop && !r->kicked)
                if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0)
                    break;
        }
        /* Kicks closer together than SBX_RECONCILE_KICK_GAP_MS are served
         * by one round: the kicked flag stays set meanwhile. */
        int64_t due = t0 + SBX_RECONCILE_KICK_GAP_MS;
        if (!r->stop && r->kicked && time_mono_ms() < due) {
            struct timespec ts = time_mono_timespec_after(due - time_mono_ms());
            while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0)
                ;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int reconcile_start(controller_t *ctl, reconcile_t **ret, char *err, size_t errlen)
{
    struct reconcile *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    r->ctl = ctl;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, reconcile_metrics_init);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    char dberr[256];
    r->db = db_connect(ctl->conninfo, dberr, sizeof dberr);
    if (!r->db) {
        snprintf(err, errlen, "reconcile loop cannot connect to the database: %s", dberr);
        free(r);
        return SBX_EUNAVAIL;
    }
    if (pthread_create(&r->tid, NULL, reconcile_main, r) != 0) {
        PQfinish(r->db);
        free(r);
        snprintf(err, errlen, "cannot start the reconcile thread");
        return SBX_ENOMEM;
    }
    *ret = r;
    return 0;
}

void reconcile_kick(reconcile_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->kicked = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void reconcile_stop(reconcile_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->tid, NULL);
    if (r->db)
        PQfinish(r->db);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}
