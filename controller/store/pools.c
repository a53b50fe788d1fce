/* Warm pools: declaring, listing and deleting them, the claim a matching
 * create makes in its own transaction, and the reconcile pass that refills
 * them. Lock order everywhere: tenant row (the create's quota), pool row,
 * then member sandbox rows. */
#include "store_int.h"

#include "metrics.h"

#include <pthread.h>

/* Unclaimed members belong to this tenant (migration 0013). */
#define POOL_TENANT "_pools"

static metric_family_t *m_claims, *m_refills, *m_ready;
static pthread_once_t pool_metrics_once = PTHREAD_ONCE_INIT;

static void pool_metrics_init(void)
{
    m_claims = metrics_family("sandbox_pool_claims_total", METRIC_COUNTER,
                              "Creates that matched a warm pool, by pool and result (hit: took a ready member; "
                              "miss: none was ready, a cold create).",
                              NULL, 0);
    m_refills = metrics_family("sandbox_pool_refills_total", METRIC_COUNTER,
                               "Warm pool members the refill pass asked for, by pool.", NULL, 0);
    m_ready = metrics_family("sandbox_pool_ready", METRIC_GAUGE,
                             "Running unclaimed members of a warm pool, as the last refill pass saw them.", NULL, 0);
}

static void pool_count(metric_family_t **f, const char *pool, const char *result, double v, bool set)
{
    pthread_once(&pool_metrics_once, pool_metrics_init);
    char labels[160];
    metrics_labels(labels, sizeof labels, "pool", pool, result ? "result" : NULL, result, NULL);
    if (set)
        metrics_set(*f, labels, v);
    else
        metrics_add(*f, labels, v);
}

bool store_pool_key(const sandbox_spec_t *s, isolation_t iso, char *out, size_t outlen)
{
    if (s->env.n > 0 || s->selector.n > 0 || s->from)
        return false;
    int n = snprintf(out, outlen, "%s|%lld|%lld|%lld|%s|%s|%d|%d", s->image, (long long)s->cpu_millis,
                     (long long)s->memory_mib, (long long)s->disk_mib, net_mode_name(s->network), isolation_name(iso),
                     s->hardened ? 1 : 0, s->read_only_root ? 1 : 0);
    return n > 0 && (size_t)n < outlen;
}

/* ---- declare, list, get, delete ---- */

#define POOL_FROM " FROM pools p LEFT JOIN tenants tn ON tn.id = p.tenant_id "

int store_pool_create(PGconn *c, const pool_decl_t *d, json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX], key[SBX_MAX_IMAGE_BYTES + 160], size[24], cpu[24], mem[24], cap[24], tcap[24];
    if (!store_pool_key(d->spec, d->isolation, key, sizeof key))
        return api_error_set(err, API_INVALID_ARGUMENT, "a pool's spec can have no env, no selector and no from");
    ids_new("pool", id);
    snprintf(size, sizeof size, "%lld", (long long)d->size);
    snprintf(cpu, sizeof cpu, "%lld", (long long)d->spec->cpu_millis);
    snprintf(mem, sizeof mem, "%lld", (long long)d->spec->memory_mib);
    snprintf(cap, sizeof cap, "%d", SBX_POOLS_MAX);
    snprintf(tcap, sizeof tcap, "%d", SBX_POOLS_PER_TENANT_MAX);
    json_object *sj = spec_to_json(d->spec);
    char *spec_text = jsonx_dump(sj);
    json_object_put(sj);
    if (!spec_text)
        return api_error_set(err, API_INTERNAL, "out of memory");
    /* The caps are counted under a transaction-wide advisory lock, so two
     * declarations cannot both pass them. */
    const char *p[] = { id, d->name, d->tenant_id, spec_text, key, isolation_name(d->isolation), cpu, mem, size,
                        d->created_by };
    int rc = 0;
    if (db_begin(c) < 0)
        goto db_fail;
    if (d->tenant_id && d->policy) {
        /* The members are the tenant's in all but name: they count against
         * its quotas from the declaration on (its creates count them too),
         * under its row lock as a create's quota is. */
        char what[SBX_POOL_NAME_MAX + 48];
        snprintf(what, sizeof what, "pool %s of %lld", d->name, (long long)d->size);
        quota_use_t asked = { d->size, d->size * d->spec->cpu_millis, d->size * d->spec->memory_mib };
        rc = store__tenant_quota(c, d->tenant_id, d->policy, &asked, what, err);
        if (rc == SBX_EINVAL) {
            db_rollback(c);
            free(spec_text);
            return rc;
        }
        if (rc < 0)
            goto db_fail;
    }
    if (db_run(c, "SELECT pg_advisory_xact_lock(hashtext('sandbox_pools'))", 0, NULL) < 0)
        goto db_fail;
    const char *pc[] = { d->name, d->tenant_id, cap, tcap };
    PGresult *r = db_exec(c,
                          "SELECT count(*) >= $3::int, count(*) FILTER (WHERE tenant_id = $2) >= $4::int, "
                          "coalesce(bool_or(name = $1), false) FROM pools",
                          4, pc);
    if (!r)
        goto db_fail;
    bool full = db_get_bool(r, 0, 0), tfull = d->tenant_id && db_get_bool(r, 0, 1), taken = db_get_bool(r, 0, 2);
    PQclear(r);
    if (taken)
        rc = api_error_set(err, API_CONFLICT, "a pool named %s exists", d->name);
    else if (full)
        rc = api_error_set(err, API_CONFLICT, "there are %d pools already (the most there can be)", SBX_POOLS_MAX);
    else if (tfull)
        rc = api_error_set(err, API_CONFLICT, "the tenant has %d pools already (the most one tenant can have)",
                           SBX_POOLS_PER_TENANT_MAX);
    if (rc < 0) {
        db_rollback(c);
        free(spec_text);
        return rc;
    }
    if (db_run(c, "INSERT INTO pools (id, name, tenant_id, spec, match_key, isolation, cpu_millis, memory_mib, size, "
                  "created_by) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10)",
               10, p) < 0)
        goto db_fail;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "pool", d->name);
    jsonx_add_int(ed, "size", d->size);
    if (store__event_add(c, d->tenant_id ? d->tenant_id : POOL_TENANT, "pool.created", NULL, NULL, ed) < 0 ||
        db_commit(c) < 0)
        goto db_fail;
    free(spec_text);
    const char *g[] = { id };
    return store__api_get(c, &store__t_pool, POOL_FROM "WHERE p.id = $1", 1, g, "pool", d->name, ret, err);
db_fail:
    free(spec_text);
    if (db_last_unique_violation()) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "a pool named %s exists", d->name);
    }
    store__db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

int store_pool_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope };
    return store__api_list(c, &store__t_pool,
                           POOL_FROM "WHERE $1::text IS NULL OR p.tenant_id = $1 OR p.tenant_id IS NULL "
                                     "ORDER BY p.name",
                           1, p, "pools", ret, err);
}

int store_pool_get(PGconn *c, const char *scope, const char *name, json_object **ret, api_error_t *err)
{
    const char *p[] = { name, scope };
    return store__api_get(c, &store__t_pool,
                          POOL_FROM "WHERE p.name = $1 AND ($2::text IS NULL OR p.tenant_id = $2 OR p.tenant_id IS NULL)",
                          2, p, "pool", name, ret, err);
}

int store_pool_delete(PGconn *c, const store_limits_t *lim, const char *scope, const char *name, json_object **ret,
                      api_error_t *err)
{
    json_object *pool = NULL;
    char pool_id[SBX_ID_MAX];
    const char *p[] = { name, scope };
    if (db_begin(c) < 0)
        return store__db_error(err);
    /* A member deletes only its own pools: a shared one is not found. */
    int rc = store__one_text(c, "SELECT id FROM pools WHERE name = $1 AND ($2::text IS NULL OR tenant_id = $2) "
                                "FOR UPDATE",
                             2, p, pool_id, sizeof pool_id);
    if (rc == SBX_ENOTFOUND) {
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no pool %.64s", name);
    }
    if (rc < 0)
        goto db_fail;
    const char *q[] = { pool_id };
    if (store__fetch_one(c, &store__t_pool, POOL_FROM "WHERE p.id = $1", 1, q, &pool) < 0)
        goto db_fail;
    /* Every sandbox row that names the pool, claimed or gone too, locked
     * in id order before any other (docs/architecture.md "Lock order"):
     * the DELETE below sets each one's pool_id to NULL, and leaving the
     * claimed ones to that cascade, after the unclaimed ones, deadlocked
     * with a transaction that held a claimed member's row and went on to
     * release an unclaimed one's allocation. */
    if (db_run(c, "SELECT 1 FROM sandboxes WHERE pool_id = $1 ORDER BY id FOR UPDATE", 1, q) < 0)
        goto db_fail;
    PGresult *r = db_exec(c, "SELECT id FROM sandboxes WHERE pool_id = $1 AND claimed_at IS NULL "
                             "AND desired_state = 'running' AND phase NOT IN ('deleted', 'failed', 'lost') "
                             "ORDER BY id FOR UPDATE",
                          1, q);
    if (!r)
        goto db_fail;
    int n = PQntuples(r);
    for (int i = 0; i < n; i++) {
        char op[SBX_ID_MAX];
        if (store__sandbox_request_delete(c, lim, POOL_TENANT, db_get(r, i, 0), NULL, NULL, NULL, op, NULL, false) < 0) {
            PQclear(r);
            goto db_fail;
        }
    }
    PQclear(r);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "pool", name);
    jsonx_add_int(ed, "deleted_members", n);
    if (db_run(c, "DELETE FROM pools WHERE id = $1", 1, q) < 0 ||
        store__event_add(c, POOL_TENANT, "pool.deleted", NULL, NULL, ed) < 0 || db_commit(c) < 0)
        goto db_fail;
    pool_count(&m_ready, name, NULL, 0, true); /* the gauge of a pool gone reads 0, not its last count */
    jsonx_add_int(pool, "deleted_members", n);
    *ret = store__wrap("pool", pool);
    return 0;
db_fail:
    if (pool)
        json_object_put(pool);
    store__db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

/* ---- the claim, inside a create's transaction ---- */

/* The matching pool the claim takes from, locked (by counting the hit
 * it hopes for; claim_miss takes it back): the caller's own tenant's
 * before a shared one. 1 with ret_id/ret_name, 0 none, SBX_EDB. */
static int claim_pool_lock(PGconn *c, const create_req_t *req, char ret_id[SBX_ID_MAX], char ret_name[72])
{
    const char *p[] = { req->tenant_id, req->pool_key };
    PGresult *r = db_exec(c, "UPDATE pools SET hits = hits + 1 WHERE id = (SELECT id FROM pools WHERE match_key = $2 "
                             "AND (tenant_id IS NULL OR tenant_id = $1) AND size > 0 "
                             "ORDER BY tenant_id NULLS LAST, id LIMIT 1) RETURNING id, name",
                          2, p);
    if (!r)
        return SBX_EDB;
    int got = PQntuples(r) == 1;
    if (got) {
        snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        snprintf(ret_name, 72, "%s", db_get(r, 0, 1));
    }
    PQclear(r);
    return got;
}

/* The claimer's create operation, recorded done: pending, admitted and
 * succeeded with its events, as an operation the controller finishes
 * alone (no worker round trip). 0 or SBX_EDB. */
static int claim_op_record(PGconn *c, const store_limits_t *lim, const create_req_t *req, const char *spec_text,
                           const char *sbx_id, const char *op_id, const char *pool_name)
{
    json_object *res = json_object_new_object();
    jsonx_add_str(res, "pool", pool_name);
    const op_origin_t from = { req->idempotency_key, req->request_hash, req->created_by };
    int rc = store__op_record_done(c, lim, "create", req->tenant_id, sbx_id, &from, spec_text, op_id, res);
    json_object_put(res);
    return rc;
}

int store__pool_claim(PGconn *c, const store_limits_t *lim, const create_req_t *req, const char *spec_text,
                      const char *op_id, char ret_sbx[SBX_ID_MAX])
{
    char pool_id[SBX_ID_MAX], pool_name[72], sbx[SBX_ID_MAX];
    int got = claim_pool_lock(c, req, pool_id, pool_name);
    if (got <= 0)
        return got;
    /* The pool row is held, so SKIP LOCKED passes over only members some
     * other transaction holds (a heartbeat, a delete): never one twice.
     * Never used by anyone: no operation but its create ever touched it
     * (an admin could reach a member before it is claimed). */
    char ttl[24], *class_text = req->classification ? jsonx_dump(req->classification) : NULL;
    snprintf(ttl, sizeof ttl, "%lld", (long long)req->spec->ttl_seconds);
    const char *u[] = { pool_id, req->tenant_id, spec_text, ttl, req->created_by, class_text, req->name };
    int rc = store__one_text(c,
                             "UPDATE sandboxes SET tenant_id = $2, spec = $3::jsonb, ttl_seconds = $4::bigint, "
                             "expires_at = now() + make_interval(secs => $4::bigint), created_by = $5, "
                             "classification = coalesce($6::jsonb, classification), claimed_at = now(), "
                             "name = $7, updated_at = now() "
                             "WHERE claimed_at IS NULL AND id = (SELECT s.id FROM sandboxes s WHERE s.pool_id = $1 "
                             "  AND s.claimed_at IS NULL AND s.desired_state = 'running' AND s.phase = 'running' "
                             "  AND EXISTS (SELECT 1 FROM workers w WHERE w.id = s.worker_id AND w.state IN ('ready', "
                             "              'draining')) " /* not one whose worker is away */
                             "  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id "
                             "                  AND o.kind <> 'create') "
                             "  ORDER BY s.created_at LIMIT 1 FOR UPDATE OF s SKIP LOCKED) RETURNING id",
                             7, u, sbx, sizeof sbx);
    free(class_text);
    if (rc == SBX_ENOTFOUND) {
        const char *p[] = { pool_id };
        if (db_run(c, "UPDATE pools SET hits = hits - 1, misses = misses + 1 WHERE id = $1", 1, p) < 0)
            return SBX_EDB;
        pool_count(&m_claims, pool_name, "miss", 1, false);
        return 0;
    }
    if (rc < 0 || claim_op_record(c, lim, req, spec_text, sbx, op_id, pool_name) < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "pool", pool_name);
    if (store__event_add(c, req->tenant_id, "pool.claimed", sbx, op_id, ed) < 0)
        return SBX_EDB;
    pool_count(&m_claims, pool_name, "hit", 1, false);
    snprintf(ret_sbx, SBX_ID_MAX, "%s", sbx);
    return 1;
}

/* ---- the refill pass ---- */

/* Adds one member of the locked pool: its sandbox row (tenant '_pools',
 * the pool's TTL) and a pending create, with the events of any create. 0
 * or SBX_EDB. */
static int refill_one(PGconn *c, const store_limits_t *lim, const PGresult *pr)
{
    const char *ttl = db_get(pr, 0, 10);
    char sbx[SBX_ID_MAX], op[SBX_ID_MAX], deadline[24];
    ids_new("sbx", sbx);
    ids_new("op", op);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    const char *pool_id = db_get(pr, 0, 0), *spec = db_get(pr, 0, 2);
    const char *ps[] = { sbx, POOL_TENANT, spec, db_get(pr, 0, 3), db_get(pr, 0, 4), db_get(pr, 0, 5), ttl, pool_id };
    if (db_run(c, "INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, "
                  "memory_mib, ttl_seconds, pool_id) VALUES ($1, $2, $3::jsonb, 'running', 'pending', $4, $5, $6, "
                  "$7, $8)",
               8, ps) < 0)
        return SBX_EDB;
    const char *po[] = { op, POOL_TENANT, sbx, spec, deadline };
    if (db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, request, deadline) "
                  "VALUES ($1, $2, $3, 'create', 'pending', $4::jsonb, now() + make_interval(secs => $5::bigint))",
               5, po) < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "pool", db_get(pr, 0, 1));
    if (store__event_add(c, POOL_TENANT, "pool.refill", sbx, op, ed) < 0)
        return SBX_EDB;
    ed = json_object_new_object();
    jsonx_add_str(ed, "kind", "create");
    jsonx_add_str(ed, "to", "pending");
    return store__event_add(c, POOL_TENANT, "operation.pending", sbx, op, ed) < 0 ? SBX_EDB : 0;
}

/* One pool, in its own transaction: how many members it misses, and up
 * to *budget of them added. *ret_added += added. The refills of a pool
 * take turns on a transaction-wide advisory lock (another controller's
 * refill under way: this pass leaves the pool to it), and the counts are
 * read after it, so two controllers do not overfill. Not on the pool's
 * row: every claim updates that row, so under steady claims a pass that
 * needed it was skipped (SKIP LOCKED) or, once it had it, held every claim
 * while it added up to a second's worth of members. FOR KEY SHARE keeps
 * the pool from being deleted meanwhile without blocking a claim. */
static int refill_pool(PGconn *c, const store_limits_t *lim, const char *pool_id, const char *max_ttl, int *budget,
                       int *ret_added)
{
    const char *p[] = { pool_id, max_ttl };
    if (db_begin(c) < 0)
        return SBX_EDB;
    PGresult *lr = db_exec(c, "SELECT pg_try_advisory_xact_lock(hashtext('sandbox_pool_refill'), hashtext($1))", 1, p);
    if (!lr) {
        db_rollback(c);
        return SBX_EDB;
    }
    bool turn = db_get_bool(lr, 0, 0);
    PQclear(lr);
    if (!turn) {
        db_rollback(c);
        return 0;
    }
    /* live: members not gone; ready: those running; recent_failures:
     * members that failed in the last minute (a pool whose image cannot
     * start waits instead of failing creates at the refill rate). */
    PGresult *r = db_exec(c,
                          "SELECT p.id, p.name, p.spec::text, p.isolation, p.cpu_millis, p.memory_mib, p.size, "
                          "  (SELECT count(*) FROM sandboxes s WHERE s.pool_id = p.id AND s.claimed_at IS NULL "
                          "   AND s.desired_state = 'running' AND s.phase NOT IN ('deleted', 'failed', 'lost')), "
                          "  (SELECT count(*) FROM sandboxes s WHERE s.pool_id = p.id AND s.claimed_at IS NULL "
                          "   AND s.desired_state = 'running' AND s.phase = 'running'), "
                          "  (SELECT count(*) FROM sandboxes s WHERE s.pool_id = p.id AND s.phase = 'failed' "
                          "   AND s.updated_at > now() - interval '60 seconds'), "
                          "  least(coalesce((p.spec->>'ttl_seconds')::bigint, $2::bigint), $2::bigint) "
                          "FROM pools p WHERE p.id = $1 FOR KEY SHARE OF p",
                          2, p);
    if (!r) {
        db_rollback(c);
        return SBX_EDB;
    }
    int rc = 0, added = 0;
    if (PQntuples(r) == 1) {
        long long size = db_get_ll(r, 0, 6), live = db_get_ll(r, 0, 7), fails = db_get_ll(r, 0, 9);
        long long want = fails >= 3 ? 0 : size - live;
        for (; rc == 0 && added < want && *budget > 0; added++, (*budget)--)
            rc = refill_one(c, lim, r);
        if (rc == 0 && added > 0) {
            char n[24];
            snprintf(n, sizeof n, "%d", added);
            const char *u[] = { pool_id, n };
            rc = db_run(c, "UPDATE pools SET refills = refills + $2::bigint WHERE id = $1", 2, u);
            pool_count(&m_refills, db_get(r, 0, 1), NULL, added, false);
        }
    }
    PQclear(r);
    if (rc < 0 || db_commit(c) < 0) {
        db_rollback(c);
        return SBX_EDB;
    }
    *ret_added += added;
    return 0;
}

int store_pool_refill(PGconn *c, const store_limits_t *lim, int64_t max_ttl_seconds, int budget, int *ret_added)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)max_ttl_seconds);
    /* One statement finds the pools short of their size (and feeds the
     * ready gauge); only those are locked and refilled. */
    PGresult *r = db_exec(c,
                          "SELECT p.id, p.name, p.size, "
                          "  count(s.id) FILTER (WHERE s.phase NOT IN ('deleted', 'failed', 'lost')), "
                          "  count(s.id) FILTER (WHERE s.phase = 'running') "
                          "FROM pools p LEFT JOIN sandboxes s ON s.pool_id = p.id AND s.claimed_at IS NULL "
                          "  AND s.desired_state = 'running' "
                          "GROUP BY p.id ORDER BY p.id",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        pool_count(&m_ready, db_get(r, i, 1), NULL, (double)db_get_ll(r, i, 4), true);
        if (db_get_ll(r, i, 3) < db_get_ll(r, i, 2) && budget > 0)
            rc = refill_pool(c, lim, db_get(r, i, 0), ttl, &budget, ret_added);
    }
    PQclear(r);
    return rc;
}
