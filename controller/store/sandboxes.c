/* Client requests: sandbox create, delete, exec, get and list, operations,
 * idempotency keys. */
#include "store_int.h"

/* ---- client requests ---- */

/* When an operation with this idempotency key exists in the tenant:
 * returns 0 and its id/kind/hash; SBX_ENOTFOUND otherwise. */
static int idem_find(PGconn *c, const char *tenant_id, const char *key, char ret_op[SBX_ID_MAX],
                     char ret_sandbox[SBX_ID_MAX], char ret_kind[16], char ret_hash[80])
{
    const char *p[] = { tenant_id, key };
    PGresult *r = db_exec(c, "SELECT id, sandbox_id, kind, coalesce(request_hash, '') FROM operations "
                             "WHERE tenant_id = $1 AND idempotency_key = $2", 2, p);
    if (!r)
        return SBX_EDB;
    int rc = SBX_ENOTFOUND;
    if (PQntuples(r) == 1) {
        snprintf(ret_op, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        snprintf(ret_sandbox, SBX_ID_MAX, "%s", db_get(r, 0, 1));
        snprintf(ret_kind, 16, "%s", db_get(r, 0, 2));
        snprintf(ret_hash, 80, "%s", db_get(r, 0, 3));
        rc = 0;
    }
    PQclear(r);
    return rc;
}

/* Replays an idempotent request: the original operation when kind and body
 * match, 409 otherwise. Returns 1 when replayed, 0 when no such key. */
int store__idem_replay(PGconn *c, const char *tenant_id, const char *key, const char *kind, const char *hash,
                       bool with_sandbox, json_object **ret, api_error_t *err)
{
    char op_id[SBX_ID_MAX], sbx_id[SBX_ID_MAX], okind[16], ohash[80];
    int rc = idem_find(c, tenant_id, key, op_id, sbx_id, okind, ohash);
    if (rc == SBX_ENOTFOUND)
        return 0;
    if (rc < 0)
        return store__db_error(err);
    if (strcmp(okind, kind) != 0 || strcmp(ohash, hash) != 0)
        return api_error_set(err, API_CONFLICT,
                             "Idempotency-Key \"%.64s\" was already used for a different %s request (operation %s)",
                             key, okind, op_id);
    if (store__op_reply(c, with_sandbox ? sbx_id : NULL, op_id, ret, err) < 0)
        return SBX_EDB;
    return 1;
}

int store__tenant_quota(PGconn *c, const char *tenant_id, const policy_t *pol, const quota_use_t *asked,
                        const char *what, api_error_t *err)
{
    const char *pq[] = { tenant_id };
    PGresult *q = db_exec(c, "SELECT deleted_at IS NOT NULL FROM tenants WHERE id = $1 FOR NO KEY UPDATE", 1, pq);
    if (!q)
        return SBX_EDB;
    bool gone = PQntuples(q) != 1 || strcmp(db_get(q, 0, 0), "t") == 0;
    PQclear(q);
    if (gone)
        return api_error_set(err, API_NOT_FOUND, "the tenant was deleted");
    /* The tenant's live counters (migration 0014), not a count of its rows:
     * the folded row plus the log not folded yet; and what its warm pools
     * hold for it (their sizes, each member at its pool's cpu and memory:
     * at most SBX_POOLS_PER_TENANT_MAX rows). */
    q = db_exec(c, "SELECT u.n, u.cpu, u.mem, p.n, p.cpu, p.mem FROM ("
                   "SELECT coalesce(sum(live), 0)::bigint AS n, coalesce(sum(live_cpu_millis), 0)::bigint AS cpu, "
                   "coalesce(sum(live_memory_mib), 0)::bigint AS mem FROM ("
                   "SELECT live, live_cpu_millis, live_memory_mib FROM sandbox_usage "
                   "WHERE tenant_id = $1 AND worker_id = '' UNION ALL "
                   "SELECT live, live_cpu_millis, live_memory_mib FROM sandbox_usage_log "
                   "WHERE tenant_id = $1 AND worker_id = '') x) u, ("
                   "SELECT coalesce(sum(size), 0)::bigint AS n, coalesce(sum(size * cpu_millis), 0)::bigint AS cpu, "
                   "coalesce(sum(size * memory_mib), 0)::bigint AS mem FROM pools WHERE tenant_id = $1) p",
                1, pq);
    if (!q)
        return SBX_EDB;
    quota_use_t live = { db_get_ll(q, 0, 0), db_get_ll(q, 0, 1), db_get_ll(q, 0, 2) },
                held = { db_get_ll(q, 0, 3), db_get_ll(q, 0, 4), db_get_ll(q, 0, 5) };
    PQclear(q);
    return quota_check(pol, &live, &held, asked, what, err);
}

json_object *store__sandbox_pending_data(const create_req_t *req)
{
    json_object *sd = json_object_new_object();
    jsonx_add_str(sd, "image", req->spec->image);
    jsonx_add_str(sd, "isolation", isolation_name(req->isolation));
    jsonx_add_str(sd, "network", net_mode_name(req->spec->network));
    jsonx_add_int(sd, "cpu_millis", req->spec->cpu_millis);
    jsonx_add_int(sd, "memory_mib", req->spec->memory_mib);
    jsonx_add_int(sd, "ttl_seconds", req->spec->ttl_seconds);
    return sd;
}

/* The events of a new sandbox: sandbox.pending (what it asked for) and its
 * create's operation.pending. 0 or SBX_EDB. */
static int create_events(PGconn *c, const create_req_t *req, const char *sbx_id, const char *op_id)
{
    if (store__event_add(c, req->tenant_id, "sandbox.pending", sbx_id, NULL, store__sandbox_pending_data(req)) < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", "create");
    jsonx_add_str(ed, "to", "pending");
    return store__event_add(c, req->tenant_id, "operation.pending", sbx_id, op_id, ed) < 0 ? SBX_EDB : 0;
}

/* A create's insert failed in its transaction: when a concurrent request
 * with the same idempotency key won (unique violation), answers with its
 * operation; else a database error. Rolls back either way. */
static int create_idem_race(PGconn *c, const create_req_t *req, json_object **ret, bool *ret_replayed,
                            api_error_t *err)
{
    bool dup = req->idempotency_key && db_last_unique_violation();
    store__db_error(err);
    db_rollback(c);
    if (!dup)
        return SBX_EDB;
    int rr = store__idem_replay(c, req->tenant_id, req->idempotency_key, "create", req->request_hash, true, ret, err);
    *ret_replayed = rr > 0;
    return rr > 0 ? 0 : (rr < 0 ? rr : store__db_error(err));
}

/* In the create's transaction: the name is free in the tenant (a
 * conflict naming the sandbox that has it otherwise). Creates of one name
 * take turns on a transaction-wide advisory lock, so the second sees the
 * first's row; the unique index (migration 0023) stands behind it. 0,
 * SBX_EINVAL (err filled) or SBX_EDB. */
static int create_name_free(PGconn *c, const create_req_t *req, api_error_t *err)
{
    const char *p[] = { req->tenant_id, req->name };
    if (db_run(c, "SELECT pg_advisory_xact_lock(hashtext('sandbox.name:' || $1 || '/' || $2))", 2, p) < 0)
        return SBX_EDB;
    char id[SBX_ID_MAX];
    int rc = store__one_text(c, "SELECT id FROM sandboxes WHERE tenant_id = $1 AND name = $2 "
                                "AND desired_state = 'running'", 2, p, id, sizeof id);
    if (rc == SBX_ENOTFOUND)
        return 0;
    if (rc < 0)
        return SBX_EDB;
    return api_error_set(err, API_CONFLICT,
                         "a sandbox named %s exists already in this tenant (%s); pick another name, or delete it "
                         "first: sandbox rm %s", req->name, id, req->name);
}

int store_sandbox_create(PGconn *c, const store_limits_t *lim, const create_req_t *req, json_object **ret,
                         bool *ret_replayed, api_error_t *err)
{
    char sbx_id[SBX_ID_MAX], op_id[SBX_ID_MAX], deadline[24], cpu[24], mem[24], ttl[24];
    *ret_replayed = false;
    if (req->idempotency_key) {
        int rr = store__idem_replay(c, req->tenant_id, req->idempotency_key, "create", req->request_hash, true, ret, err);
        if (rr != 0) {
            *ret_replayed = rr > 0;
            return rr > 0 ? 0 : rr;
        }
    }
    ids_new("sbx", sbx_id);
    ids_new("op", op_id);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    snprintf(cpu, sizeof cpu, "%lld", (long long)req->spec->cpu_millis);
    snprintf(mem, sizeof mem, "%lld", (long long)req->spec->memory_mib);
    snprintf(ttl, sizeof ttl, "%lld", (long long)req->spec->ttl_seconds);
    json_object *sj = spec_to_json(req->spec);
    char *spec_text = jsonx_dump(sj);
    json_object_put(sj);
    if (!spec_text)
        return api_error_set(err, API_INTERNAL, "out of memory");

    if (db_begin(c) < 0)
        goto db_fail;
    if (req->name) {
        int nf = create_name_free(c, req, err);
        if (nf == SBX_EINVAL) {
            db_rollback(c);
            free(spec_text);
            return SBX_EINVAL;
        }
        if (nf < 0)
            goto db_fail;
    }
    if (req->policy) {
        quota_use_t one = { 1, req->spec->cpu_millis, req->spec->memory_mib };
        int q = store__tenant_quota(c, req->tenant_id, req->policy, &one, NULL, err);
        if (q == SBX_EINVAL) {
            db_rollback(c);
            free(spec_text);
            return SBX_EINVAL;
        }
        if (q < 0)
            goto db_fail;
    }
    if (req->spec->nvolumes > 0) {
        int v = store__volumes_claim(c, req->tenant_id, req->spec, err);
        if (v == SBX_EINVAL) {
            db_rollback(c);
            free(spec_text);
            return SBX_EINVAL;
        }
        if (v < 0)
            goto db_fail;
    }
    if (req->pool_key) {
        /* A ready member of a matching pool: the create is done now. */
        int got = store__pool_claim(c, lim, req, spec_text, op_id, sbx_id);
        if (got > 0 && db_commit(c) == 0) {
            free(spec_text);
            return store__op_reply(c, sbx_id, op_id, ret, err);
        }
        if (got != 0) {
            free(spec_text);
            return create_idem_race(c, req, ret, ret_replayed, err);
        }
    }
    char *class_text = req->classification ? jsonx_dump(req->classification) : NULL;
    json_object *op = NULL;
    int placed = store__create_placed(c, lim, req, spec_text, class_text, sbx_id, op_id, &op);
    if (placed < 0) {
        free(class_text);
        free(spec_text);
        return create_idem_race(c, req, ret, ret_replayed, err);
    }
    if (placed > 0) {
        json_object *sbx = NULL;
        free(class_text);
        free(spec_text);
        if (db_commit(c) < 0) {
            json_object_put(op);
            store__db_error(err);
            db_rollback(c);
            return SBX_EDB;
        }
        if (store__load_sandbox(c, sbx_id, &sbx) < 0) {
            json_object_put(op);
            return store__db_error(err);
        }
        *ret = store__wrap("sandbox", sbx);
        jsonx_add(*ret, "operation", op);
        return 0;
    }
    const char *ps[] = { sbx_id, req->tenant_id, spec_text, isolation_name(req->isolation), cpu, mem, ttl,
                         req->created_by, class_text, req->name };
    int ins = db_run(c, "INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, "
                        "memory_mib, ttl_seconds, created_by, classification, name) VALUES ($1, $2, $3::jsonb, "
                        "'running', 'pending', $4, $5, $6, $7, $8, $9::jsonb, $10)", 10, ps);
    free(class_text);
    if (ins < 0)
        goto db_fail;
    const char *po[] = { op_id, req->tenant_id, sbx_id, req->idempotency_key, req->request_hash, spec_text, deadline,
                         req->created_by };
    if (db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, request_hash, "
                  "request, deadline, created_by) VALUES ($1, $2, $3, 'create', 'pending', $4, $5, $6::jsonb, "
                  "now() + make_interval(secs => $7::bigint), $8)", 8, po) < 0) {
        free(spec_text);
        return create_idem_race(c, req, ret, ret_replayed, err);
    }
    if (create_events(c, req, sbx_id, op_id) < 0 || store__place_now(c, lim, op_id, true) < 0 || db_commit(c) < 0)
        goto db_fail;
    free(spec_text);
    return store__op_reply(c, sbx_id, op_id, ret, err);
db_fail:
    free(spec_text);
    store__db_error(err);
    db_rollback(c);
    return SBX_EDB;
}

/* Locks the sandbox row in scope. Returns 0 with tenant id and phase, the
 * worker it is on into *ret_worker (may be NULL) and, read in the same
 * statement, its tenant's policy into *ret_policy (may be NULL: not read;
 * else the caller releases it). */
int store__sandbox_lock(PGconn *c, const char *scope, const char *sandbox_id, char ret_tenant[SBX_ID_MAX],
                        char ret_phase[24], char ret_desired[16], sbx_worker_t *ret_worker, policy_t *ret_policy,
                        api_error_t *err)
{
    const char *p[] = { sandbox_id, scope };
    if (ret_policy)
        policy_init(ret_policy);
    /* one statement, with the tenant's policy joined in or not */
#define LOCK_COLS "SELECT s.tenant_id, s.phase, s.desired_state, coalesce(s.worker_id, ''), " \
                  "  " STORE_WORKER_GO_STATE ", coalesce(w.name, '')"
#define LOCK_FROM " FROM sandboxes s LEFT JOIN workers w ON w.id = s.worker_id "
#define LOCK_WHERE "WHERE s.id = $1 AND ($2::text IS NULL OR s.tenant_id = $2) FOR UPDATE OF s"
    PGresult *r = db_exec(c,
                          ret_policy ? LOCK_COLS ", tn.policy::text" LOCK_FROM
                                                 "JOIN tenants tn ON tn.id = s.tenant_id " LOCK_WHERE
                                     : LOCK_COLS LOCK_FROM LOCK_WHERE,
                          2, p);
#undef LOCK_COLS
#undef LOCK_FROM
#undef LOCK_WHERE
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    }
    snprintf(ret_tenant, SBX_ID_MAX, "%s", db_get(r, 0, 0));
    snprintf(ret_phase, 24, "%s", db_get(r, 0, 1));
    snprintf(ret_desired, 16, "%s", db_get(r, 0, 2));
    if (ret_worker) {
        snprintf(ret_worker->id, sizeof ret_worker->id, "%s", db_get(r, 0, 3));
        snprintf(ret_worker->state, sizeof ret_worker->state, "%s", db_get(r, 0, 4));
        snprintf(ret_worker->name, sizeof ret_worker->name, "%s", db_get(r, 0, 5));
    }
    if (ret_policy)
        store__policy_parse(db_get(r, 0, 6), ret_policy);
    PQclear(r);
    return 0;
}

/* Begins a transaction and locks the sandbox row in scope (as
 * store__sandbox_lock); on failure the transaction is rolled back. */
int store__sandbox_begin_locked(PGconn *c, const char *scope, const char *sandbox_id, char ret_tenant[SBX_ID_MAX],
                                char ret_phase[24], char ret_desired[16], sbx_worker_t *ret_worker,
                                policy_t *ret_policy, api_error_t *err)
{
    if (db_begin(c) < 0)
        return store__db_error(err);
    int rc = store__sandbox_lock(c, scope, sandbox_id, ret_tenant, ret_phase, ret_desired, ret_worker, ret_policy,
                                 err);
    if (rc < 0)
        db_rollback(c);
    return rc;
}

/* The start of a request on an existing sandbox: replays an idempotent
 * one (idem set and a tenant scope: returns 1 with *ret), or begins a
 * transaction holding the sandbox row (returns 0). < 0 with err set. */
int store__sandbox_request_begin(PGconn *c, const char *scope, const char *sandbox_id, const char *idem,
                                 const char *kind, const char *hash, json_object **ret, char ret_tenant[SBX_ID_MAX],
                                 char ret_phase[24], char ret_desired[16], sbx_worker_t *ret_worker,
                                 policy_t *ret_policy, api_error_t *err)
{
    if (idem && scope) {
        int rr = store__idem_replay(c, scope, idem, kind, hash, false, ret, err);
        if (rr != 0)
            return rr;
    }
    return store__sandbox_begin_locked(c, scope, sandbox_id, ret_tenant, ret_phase, ret_desired, ret_worker,
                                       ret_policy, err);
}

/* Inside a transaction that holds the sandbox row: records the wish to
 * delete, cancels a create that has not been placed, and adds a delete
 * operation (or returns the open one). ret_op gets its id; *ret_op_json
 * (ret_op_json may be NULL) the operation, or NULL when the caller must
 * read it. then_commit: the caller commits right after, so the last
 * statement may take the COMMIT with it (db_commit_with_next). */
int store__sandbox_request_delete(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                                  const char *idem, const char *hash, const char *created_by, char ret_op[SBX_ID_MAX],
                                  json_object **ret_op_json, bool then_commit)
{
    if (ret_op_json)
        *ret_op_json = NULL;
    const char *p[] = { sandbox_id };
    /* What the delete depends on, in one read: an open delete, a create
     * nobody has taken yet, another operation in a worker's hands, where
     * the sandbox is. */
    PGresult *f = db_exec(c,
                          "SELECT (SELECT id FROM operations WHERE sandbox_id = $1 AND kind = 'delete' "
                          "    AND state IN ('pending', 'admitted', 'leased', 'running', 'succeeded') "
                          "    ORDER BY created_at DESC LIMIT 1), "
                          "  EXISTS (SELECT 1 FROM operations WHERE sandbox_id = $1 AND kind = 'create' "
                          "    AND state IN ('pending', 'admitted')), "
                          "  EXISTS (SELECT 1 FROM operations WHERE sandbox_id = $1 AND kind <> 'exec' "
                          "    AND state IN ('leased', 'running')), "
                          "  s.phase, s.desired_state, coalesce(s.worker_id, ''), " STORE_WORKER_GO_STATE ", "
                          "  coalesce(w.name, '') "
                          "FROM sandboxes s LEFT JOIN workers w ON w.id = s.worker_id WHERE s.id = $1",
                          1, p);
    if (!f)
        return SBX_EDB;
    if (PQntuples(f) != 1) {
        PQclear(f);
        return SBX_EDB;
    }
    if (db_get(f, 0, 0)) {
        snprintf(ret_op, SBX_ID_MAX, "%s", db_get(f, 0, 0));
        PQclear(f);
        return 0;
    }
    bool unplaced = db_get_bool(f, 0, 1), busy = db_get_bool(f, 0, 2);
    char phase[24], desired[16];
    sbx_worker_t w;
    snprintf(phase, sizeof phase, "%s", db_get(f, 0, 3));
    snprintf(desired, sizeof desired, "%s", db_get(f, 0, 4));
    snprintf(w.id, sizeof w.id, "%s", db_get(f, 0, 5));
    snprintf(w.state, sizeof w.state, "%s", db_get(f, 0, 6));
    snprintf(w.name, sizeof w.name, "%s", db_get(f, 0, 7));
    PQclear(f);
    char op_id[SBX_ID_MAX];
    ids_new("op", op_id);
    json_object *ed = json_object_new_object();
    if (created_by && (strcmp(created_by, "ttl") == 0 || strcmp(created_by, "retry") == 0))
        jsonx_add_str(ed, "reason", created_by);
    op_insert_t oi = { .id = op_id, .tenant_id = tenant_id, .sandbox_id = sandbox_id, .kind = "delete",
                       .idempotency_key = idem, .request_hash = hash, .created_by = created_by,
                       .deadline_seconds = lim->deadline_seconds, .state = OP_PENDING, .pending_data = ed };
    /* (a sandbox whose worker is unreachable or stopping waits for it,
     * deleting: see place_on_worker) */
    if (!unplaced && !busy && w.id[0] && strcmp(w.state, "lost") != 0 && strcmp(w.state, "unreachable") != 0 &&
        strcmp(w.state, "stopping") != 0 && strcmp(phase, "pending") != 0) {
        /* Nothing to cancel or wait for: leased to the sandbox's worker
         * now, as place_on_worker would, the sandbox deleting. */
        json_object *pl = store__placement_here(w.name, STORE_WHY_DELETE_HERE);
        oi.state = OP_LEASED;
        oi.worker_id = w.id;
        oi.worker_name = w.name;
        oi.lease_seconds = lim->lease_seconds;
        oi.placement = pl;
        /* its events first, then the sandbox's, as the steps one by one
         * would have written them */
        int rc = store__op_insert(c, &oi, ret_op_json);
        if (rc == 0 && then_commit)
            db_commit_with_next(c); /* what follows is one statement or none */
        if (rc == 0)
            rc = strcmp(phase, "deleting") != 0
                     ? store__sandbox_set_phase(c, sandbox_id, PH_DELETING, "desired_state = 'deleted'", 0, NULL)
                 : strcmp(desired, "deleted") != 0
                     ? db_run(c, "UPDATE sandboxes SET desired_state = 'deleted', updated_at = now() WHERE id = $1", 1, p)
                     : 0;
        json_object_put(pl);
        if (rc < 0)
            return SBX_EDB;
        store__count_placed_now("delete");
        memcpy(ret_op, op_id, SBX_ID_MAX);
        return 0;
    }
    if (db_run(c, "UPDATE sandboxes SET desired_state = 'deleted', updated_at = now() WHERE id = $1", 1, p) < 0) {
        json_object_put(ed);
        return SBX_EDB;
    }
    /* A create nobody has taken yet is simply cancelled. */
    PGresult *r = unplaced ? db_exec(c, "SELECT id, state FROM operations WHERE sandbox_id = $1 AND kind = 'create' "
                                        "AND state IN ('pending', 'admitted')", 1, p)
                           : NULL;
    if (unplaced && !r) {
        json_object_put(ed);
        return SBX_EDB;
    }
    for (int i = 0; r && i < PQntuples(r); i++) {
        op_state_t from;
        op_state_parse(db_get(r, i, 1), &from);
        const char *x[] = { "cancelled", "the sandbox was deleted before it was placed" };
        int rc = store__op_cas(c, db_get(r, i, 0), from, OP_CANCELLED, "error_code = $4, error_message = $5", 2, x, NULL);
        if (rc == SBX_EDB) {
            PQclear(r);
            json_object_put(ed);
            return SBX_EDB;
        }
    }
    PQclear(r);
    if (store__op_insert(c, &oi, NULL) < 0)
        return SBX_EDB;
    memcpy(ret_op, op_id, SBX_ID_MAX);
    return store__place_now(c, lim, op_id, false) < 0 ? SBX_EDB : 0;
}

int store_sandbox_delete(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                         const char *idempotency_key, const char *request_hash, const char *created_by,
                         json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    int rc = store__sandbox_request_begin(c, scope, sandbox_id, idempotency_key, "delete", request_hash, ret, tenant_id,
                                          phase, desired, NULL, NULL, err);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    json_object *op = NULL;
    if (store__sandbox_request_delete(c, lim, tenant_id, sandbox_id, idempotency_key, request_hash, created_by, op_id,
                                      &op, true) < 0 ||
        db_commit(c) < 0) {
        json_object_put(op);
        store__db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    if (op) {
        *ret = store__wrap("operation", op);
        return 0;
    }
    return store__op_reply(c, NULL, op_id, ret, err);
}

int store__not_running(PGconn *c, const char *sandbox_id, const char *phase, const char *desired, const char *what,
                       api_error_t *err)
{
    bool going = strcmp(desired, "deleted") == 0;
    if (going && strcmp(phase, "deleted") == 0)
        return api_error_set(err, API_CONFLICT, "sandbox %s is deleted; %s needs a running sandbox: create a new one",
                             sandbox_id, what);
    if (going)
        return api_error_set(err, API_CONFLICT,
                             "sandbox %s is being deleted (phase %s); %s needs a running sandbox: create a new one",
                             sandbox_id, phase, what);
    if (strcmp(phase, "paused") == 0)
        return api_error_set(err, API_CONFLICT,
                             "sandbox %s is paused; %s needs a running sandbox: resume it first (sandbox resume %s)",
                             sandbox_id, what, sandbox_id);
    if (strcmp(phase, "failed") == 0 || strcmp(phase, "lost") == 0) {
        /* Say why a failed sandbox stopped. */
        char why[200] = "";
        PGresult *f = db_exec(c, "SELECT failure->>'reason', failure->>'exit_code' FROM sandboxes "
                                 "WHERE id = $1 AND failure IS NOT NULL", 1, (const char *const[]){ sandbox_id });
        if (f && PQntuples(f) == 1 && db_get(f, 0, 0))
            snprintf(why, sizeof why, " (%.60s%s%.20s)", db_get(f, 0, 0), db_get(f, 0, 1) ? ", exit code " : "",
                     db_get(f, 0, 1) ? db_get(f, 0, 1) : "");
        PQclear(f);
        return api_error_set(err, API_CONFLICT,
                             "sandbox %s is %s%s; %s needs a running sandbox: read its logs and events, delete it "
                             "and create a new one",
                             sandbox_id, phase, why, what);
    }
    /* Not running yet: name the create operation to wait for. */
    char op[SBX_ID_MAX] = "";
    PGresult *o = db_exec(c, "SELECT id FROM operations WHERE sandbox_id = $1 AND kind = 'create' "
                             "ORDER BY created_at DESC LIMIT 1", 1, (const char *const[]){ sandbox_id });
    if (o && PQntuples(o) == 1 && db_get(o, 0, 0))
        snprintf(op, sizeof op, "%s", db_get(o, 0, 0));
    PQclear(o);
    if (*op)
        return api_error_set(err, API_CONFLICT,
                             "sandbox %s is %s, not running yet; wait for its create operation %s (sandbox wait %s, "
                             "MCP sandbox_wait) and try again",
                             sandbox_id, phase, op, op);
    return api_error_set(err, API_CONFLICT, "sandbox %s is %s, not running yet; %s needs a running sandbox",
                         sandbox_id, phase, what);
}

int store_exec_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                      json_object *exec_request, const char *idempotency_key, const char *request_hash,
                      const char *created_by, json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    sbx_worker_t w;
    policy_t pol;
    int rc = store__sandbox_request_begin(c, scope, sandbox_id, idempotency_key, "exec", request_hash, ret, tenant_id,
                                          phase, desired, &w, &pol, err);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    if (strcmp(phase, "running") != 0 || strcmp(desired, "running") != 0) {
        policy_release(&pol);
        int r = store__not_running(c, sandbox_id, phase, desired, "exec", err);
        db_rollback(c);
        return r;
    }
    if ((rc = store__refuse_if_away(c, &w, "exec in", sandbox_id, err)) < 0) {
        policy_release(&pol);
        return rc;
    }
    int64_t asked = 0;
    jsonx_get_int(exec_request, "max_output_bytes", &asked);
    if (pol.exec_output_max_bytes && asked > pol.exec_output_max_bytes) {
        long long cap = (long long)pol.exec_output_max_bytes;
        db_rollback(c);
        policy_release(&pol);
        return api_error_set(err, API_POLICY_DENIED,
                             "max_output_bytes %lld is over the tenant policy exec_output_max_bytes = %lld",
                             (long long)asked, cap);
    }
    if (asked <= 0 && (pol.exec_output_default_bytes || pol.exec_output_max_bytes)) {
        int64_t d = pol.exec_output_default_bytes ? pol.exec_output_default_bytes : lim->exec_output_default;
        if (pol.exec_output_max_bytes && d > pol.exec_output_max_bytes)
            d = pol.exec_output_max_bytes;
        jsonx_add_int(exec_request, "max_output_bytes", d);
    }
    policy_release(&pol);
    ids_new("op", op_id);
    char *req_text = jsonx_dump(exec_request);
    /* An exec runs where its sandbox runs: leased to that worker in this
     * transaction (as place_on_worker would), one statement with its
     * events; the worker's parked poll hears of it from the commit. */
    json_object *pl = store__placement_here(w.name, STORE_WHY_EXEC_HERE);
    op_insert_t oi = { .id = op_id, .tenant_id = tenant_id, .sandbox_id = sandbox_id, .kind = "exec",
                       .idempotency_key = idempotency_key, .request_hash = request_hash, .request_text = req_text,
                       .created_by = created_by, .deadline_seconds = lim->deadline_seconds,
                       .state = w.id[0] ? OP_LEASED : OP_PENDING, .worker_id = w.id, .worker_name = w.name,
                       .lease_seconds = lim->lease_seconds, .placement = pl };
    json_object *op = NULL;
    if (oi.state == OP_LEASED)
        db_commit_with_next(c); /* the insert is the transaction's last statement */
    rc = store__op_insert(c, &oi, &op);
    json_object_put(pl);
    free(req_text);
    if (rc < 0) {
        bool dup = idempotency_key && db_last_unique_violation();
        db_rollback(c);
        if (dup) {
            int rr = store__idem_replay(c, tenant_id, idempotency_key, "exec", request_hash, false, ret, err);
            return rr > 0 ? 0 : (rr < 0 ? rr : store__db_error(err));
        }
        return store__db_error(err);
    }
    if ((oi.state == OP_PENDING && store__place_now(c, lim, op_id, false) < 0) || db_commit(c) < 0) {
        json_object_put(op);
        store__db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    if (oi.state == OP_PENDING) {
        json_object_put(op);
        return store__op_reply(c, NULL, op_id, ret, err);
    }
    store__count_placed_now("exec");
    *ret = store__wrap("operation", op);
    return 0;
}

static char *text_array(const char *const *ids, int n);

/* The operations of "SELECT <op columns>" + tail, each with
 * "history":[{"state","at"}…] (its operation.* events, oldest first), in
 * one statement: the history is a correlated subquery on the events'
 * (operation_id, id) index, an extra last column. *ret: a new array.
 * 0 or SBX_EDB. */
#define OP_HISTORY_COL                                                                                              \
    ", coalesce((SELECT json_agg(json_build_object('state', coalesce(e.data->>'to', substr(e.kind, 11)), 'at', " \
    TS("e.ts") ") ORDER BY e.id)::text FROM events e WHERE e.operation_id = o.id AND e.kind LIKE 'operation.%'), " \
    "'[]') "
static int fetch_ops_with_history(PGconn *c, const char *tail, int n, const char *const *p, json_object **ret)
{
    char sql[512];
    snprintf(sql, sizeof sql, "%s%s", OP_HISTORY_COL, tail);
    PGresult *r = store__exec_cols(c, &store__t_op, "SELECT ", sql, n, p);
    if (!r)
        return SBX_EDB;
    json_object *arr = json_object_new_array();
    int hist = PQnfields(r) - 1;
    for (int i = 0; i < PQntuples(r); i++) {
        json_object *op = store__row_json(&store__t_op, r, i), *h = store__parse_json_text(db_get(r, i, hist));
        jsonx_add(op, "history", h && json_object_is_type(h, json_type_array) ? h : json_object_new_array());
        if (h && !json_object_is_type(h, json_type_array))
            json_object_put(h);
        json_object_array_add(arr, op);
    }
    PQclear(r);
    *ret = arr;
    return 0;
}

int store_sandbox_get(PGconn *c, const char *scope, const char *sandbox_id, json_object **ret, api_error_t *err)
{
    const char *p[] = { sandbox_id, scope };
    json_object *sbx = NULL, *ops = NULL;
    int rc = store__fetch_one(c, &store__t_sandbox, SANDBOX_FROM "WHERE s.id = $1 AND ($2::text IS NULL OR s.tenant_id = $2)",
                              2, p, &sbx);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    if (rc < 0)
        return store__db_error(err);
    if (fetch_ops_with_history(c, " FROM operations o WHERE o.sandbox_id = $1 ORDER BY o.created_at DESC LIMIT 20", 1,
                               p, &ops) < 0) {
        json_object_put(sbx);
        return store__db_error(err);
    }
    *ret = store__wrap("sandbox", sbx);
    jsonx_add(*ret, "operations", ops);
    return 0;
}

bool store_list_cursor_valid(const char *cursor)
{
    /* YYYYMMDDTHHMMSS.ffffff_sbx_… : the last row's created_at (UTC, to
     * the microsecond) and id. */
    static const char shape[] = "ddddddddTdddddd.dddddd_";
    size_t n = sizeof shape - 1;
    if (!cursor || strlen(cursor) <= n)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool ok = shape[i] == 'd' ? (cursor[i] >= '0' && cursor[i] <= '9') : cursor[i] == shape[i];
        if (!ok)
            return false;
    }
    return ids_valid("sbx", cursor + n);
}

/* The page's rows are chosen by id alone, on an index, in the inner query
 * (keyset: strictly after the cursor's (created_at, id), newest first); only
 * those rows are then fetched, joined and formatted. One more row than asked tells
 * whether a next page exists. */
int store_sandbox_list(PGconn *c, const char *scope, const char *tenant_name, bool include_deleted, int limit,
                       const char *after, const char *labels_json, const char *phases, json_object **ret,
                       api_error_t *err)
{
    if (after && !store_list_cursor_valid(after))
        return api_error_set(err, API_INVALID_ARGUMENT, "after must be a cursor from a list answer's next");
    char lim[16], tail[1024];
    snprintf(lim, sizeof lim, "%d", limit + 1);
    const char *p[6] = { lim };
    int n = 1;
    char where[512] = "";
    size_t w = 0;
    if (scope) {
        p[n++] = scope;
        w += (size_t)snprintf(where + w, sizeof where - w, " AND k.tenant_id = $%d", n);
    }
    if (tenant_name) {
        p[n++] = tenant_name;
        w += (size_t)snprintf(where + w, sizeof where - w,
                              " AND k.tenant_id = (SELECT id FROM tenants WHERE name = $%d)", n);
    }
    if (after) {
        p[n++] = after;
        w += (size_t)snprintf(where + w, sizeof where - w,
                              " AND (k.created_at, k.id) < ((split_part($%d, '_', 1)::timestamp AT TIME ZONE 'UTC'), "
                              "substr($%d, 24))", n, n);
    }
    if (labels_json) {
        p[n++] = labels_json;
        w += (size_t)snprintf(where + w, sizeof where - w, " AND k.spec->'labels' @> $%d::jsonb", n);
    }
    if (phases) {
        p[n++] = phases;
        w += (size_t)snprintf(where + w, sizeof where - w, " AND k.phase = ANY (string_to_array($%d, ','))", n);
    } else if (!include_deleted) {
        snprintf(where + w, sizeof where - w, " AND k.phase <> 'deleted'");
    }
    /* The ids as an array, so that the page's rows are then fetched by
     * primary key (a join on the subquery may hash all of sandboxes). */
    snprintf(tail, sizeof tail,
             ", to_char(s.created_at AT TIME ZONE 'UTC', 'YYYYMMDD\"T\"HH24MISS.US') || '_' || s.id "
             SANDBOX_FROM "WHERE s.id = ANY (ARRAY(SELECT k.id FROM sandboxes k WHERE true%s "
             "ORDER BY k.created_at DESC, k.id DESC LIMIT $1::int)) ORDER BY s.created_at DESC, s.id DESC",
             where);
    PGresult *r = store__exec_cols(c, &store__t_sandbox, "SELECT ", tail, n, p);
    if (!r)
        return store__db_error(err);
    int rows = PQntuples(r), shown = rows > limit ? limit : rows;
    json_object *arr = json_object_new_array();
    for (int i = 0; i < shown; i++)
        json_object_array_add(arr, store__row_raw(&store__t_sandbox, r, i));
    *ret = store__wrap("sandboxes", arr);
    int cur = PQnfields(r) - 1;
    jsonx_add(*ret, "next", rows > limit ? json_object_new_string(db_get(r, shown - 1, cur)) : NULL);
    PQclear(r);
    return 0;
}

int store_operation_get(PGconn *c, const char *scope, const char *op_id, json_object **ret, bool *ret_terminal,
                        api_error_t *err)
{
    const char *p[] = { op_id, scope };
    json_object *one = NULL;
    int rc = fetch_ops_with_history(c, " FROM operations o WHERE o.id = $1 AND ($2::text IS NULL OR o.tenant_id = $2)", 2,
                                    p, &one);
    if (rc < 0)
        return store__db_error(err);
    if (json_object_array_length(one) != 1) {
        json_object_put(one);
        return api_error_set(err, API_NOT_FOUND, "no operation %.64s", op_id);
    }
    op_state_t st = OP_PENDING;
    op_state_parse(jsonx_get_str(json_object_array_get_idx(one, 0), "state"), &st);
    if (ret_terminal)
        *ret_terminal = op_state_terminal(st);
    *ret = store__wrap("operation", json_object_get(json_object_array_get_idx(one, 0)));
    json_object_put(one);
    return 0;
}

/* Builds a text[] literal {"a","b"} from ids (ids contain only [a-z0-9_]). */
static char *text_array(const char *const *ids, int n)
{
    size_t len = 3;
    for (int i = 0; i < n; i++)
        len += strlen(ids[i]) + 3;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t o = 0;
    s[o++] = '{';
    for (int i = 0; i < n; i++) {
        o += (size_t)snprintf(s + o, len - o, "%s\"%s\"", i ? "," : "", ids[i]);
    }
    s[o++] = '}';
    s[o] = '\0';
    return s;
}

/* Sets ret_flags[i] for each ids[i] the query (taking $1 text[]) returns. */
int store__flag_ids(PGconn *c, const char *sql, const char *const *ids, int n, bool *ret_flags)
{
    for (int i = 0; i < n; i++)
        ret_flags[i] = false;
    if (n == 0)
        return 0;
    char *arr = text_array(ids, n);
    if (!arr)
        return SBX_ENOMEM;
    const char *p[] = { arr };
    PGresult *r = db_exec(c, sql, 1, p);
    free(arr);
    if (!r)
        return SBX_EDB;
    for (int k = 0; k < PQntuples(r); k++)
        for (int i = 0; i < n; i++)
            if (strcmp(ids[i], db_get(r, k, 0)) == 0)
                ret_flags[i] = true;
    PQclear(r);
    return 0;
}

int store_operations_terminal(PGconn *c, const char *const *ids, int n, bool *ret_flags)
{
    return store__flag_ids(c, "SELECT id FROM operations WHERE id = ANY($1::text[]) "
                       "AND state IN ('succeeded', 'failed', 'cancelled')", ids, n, ret_flags);
}

int store_workers_with_leases(PGconn *c, const char *const *ids, int n, bool *ret_flags)
{
    return store__flag_ids(c, "SELECT DISTINCT lease_worker_id FROM operations WHERE lease_worker_id = ANY($1::text[]) "
                       "AND state = 'leased'", ids, n, ret_flags);
}

int store_sandbox_by_name(PGconn *c, const char *scope, const char *own_tenant, const char *name,
                          char ret_id[SBX_ID_MAX], api_error_t *err)
{
    const char *p[] = { name, scope, own_tenant && own_tenant[0] ? own_tenant : NULL };
    PGresult *r = db_exec(c, "SELECT s.id, tn.name, s.tenant_id = $3 FROM sandboxes s JOIN tenants tn ON "
                             "tn.id = s.tenant_id WHERE s.name = $1 AND s.desired_state = 'running' "
                             "AND ($2::text IS NULL OR s.tenant_id = $2) "
                             "ORDER BY s.tenant_id = $3 DESC NULLS LAST, s.id LIMIT 3",
                          3, p);
    if (!r)
        return store__db_error(err);
    int n = PQntuples(r);
    if (n == 0) {
        PQclear(r);
        api_error_set(err, API_NOT_FOUND,
                      "no sandbox named %s (a deleted sandbox's name is free; see: sandbox list --all)", name);
        return SBX_ENOTFOUND;
    }
    if (n > 1 && !db_get_bool(r, 0, 2)) {
        api_error_set(err, API_CONFLICT, "the name %s is used in several tenants (%s in %s, %s in %s); use the id",
                      name, db_get(r, 0, 0), db_get(r, 0, 1), db_get(r, 1, 0), db_get(r, 1, 1));
        PQclear(r);
        return SBX_EINVAL;
    }
    snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
    PQclear(r);
    return 0;
}
