/* Extend: a sandbox's TTL moved to N seconds from now, an operation the
 * controller completes alone in the request's transaction. */
#include "store_int.h"

/* The sandbox's expiry before and after the move, as the API shows times
 * ("" for none: a sandbox not running yet has no expiry, only a TTL that
 * starts when it runs). */
typedef struct extend_times {
    char before[40], after[40];
} extend_times_t;

/* Inside the transaction holding the sandbox row: a running sandbox
 * expires ttl seconds from now; one not running yet gets ttl as the TTL
 * its clock starts with. 0 or SBX_EDB. */
static int extend_move(PGconn *c, const char *sandbox_id, const char *ttl, extend_times_t *ret)
{
    const char *p[] = { sandbox_id, ttl };
    PGresult *r = db_exec(c, "WITH old AS (SELECT expires_at FROM sandboxes WHERE id = $1) "
                             "UPDATE sandboxes s SET updated_at = now(), "
                             "  expires_at = CASE WHEN s.phase = 'running' "
                             "    THEN now() + make_interval(secs => $2::bigint) ELSE s.expires_at END, "
                             "  ttl_seconds = CASE WHEN s.phase IN ('running', 'paused') THEN s.ttl_seconds ELSE $2::bigint END, "
                             /* paused: the seconds it will have once resumed */
                             "  paused_ttl_seconds = CASE WHEN s.phase = 'paused' THEN $2::bigint "
                             "    ELSE s.paused_ttl_seconds END "
                             "FROM old WHERE s.id = $1 RETURNING coalesce(" TS("old.expires_at") ", ''), "
                             "coalesce(" TS("s.expires_at") ", '')",
                          2, p);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    snprintf(ret->before, sizeof ret->before, "%s", db_get(r, 0, 0));
    snprintf(ret->after, sizeof ret->after, "%s", db_get(r, 0, 1));
    PQclear(r);
    return 0;
}

/* What the operation's result and the sandbox.extended event say: the
 * TTL asked and the expiry before and after (null: none). */
static json_object *extend_json(int64_t ttl_seconds, const extend_times_t *t)
{
    json_object *o = json_object_new_object();
    jsonx_add_int(o, "ttl_seconds", ttl_seconds);
    jsonx_add_str(o, "previous_expires_at", *t->before ? t->before : NULL);
    jsonx_add_str(o, "expires_at", *t->after ? t->after : NULL);
    return o;
}

/* The operation, created and finished with its events: pending (as every
 * operation starts), admitted, succeeded with its result. 0 or SBX_EDB. */
static int extend_op_record(PGconn *c, const store_limits_t *lim, const extend_req_t *req, const char *tenant_id,
                            const char *op_id, json_object *result)
{
    char ttl[48];
    snprintf(ttl, sizeof ttl, "{\"ttl_seconds\":%lld}", (long long)req->ttl_seconds);
    const op_origin_t from = { req->idempotency_key, req->request_hash, req->created_by };
    return store__op_record_done(c, lim, "extend", tenant_id, req->sandbox_id, &from, ttl, op_id, result);
}

/* 409 for a sandbox that is gone or going, 422 over the TTL ceiling; 0
 * when the extend may go on. Inside the transaction (rolled back by the
 * caller on a refusal). */
static int extend_allowed(const extend_req_t *req, const policy_t *pol, const char *phase, const char *desired,
                          api_error_t *err)
{
    static const char *const gone[] = { "deleting", "deleted", "failed", "lost", NULL };
    bool live = strcmp(desired, "running") == 0;
    for (int i = 0; live && gone[i]; i++)
        live = strcmp(phase, gone[i]) != 0;
    if (!live)
        return api_error_set(err, API_CONFLICT, "sandbox %s is %s%s; only a live sandbox can be extended",
                             req->sandbox_id, phase,
                             strcmp(desired, "deleted") == 0 && strcmp(phase, "deleted") != 0 ? " and being deleted"
                                                                                                : "");
    return policy_check_limit("ttl_seconds", req->ttl_seconds, "max_ttl_seconds", req->max_ttl_seconds,
                              pol->max_ttl_seconds, err);
}

int store_sandbox_extend(PGconn *c, const store_limits_t *lim, const extend_req_t *req, json_object **ret,
                         api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX], ttl[24];
    policy_t pol;
    int rc = store__sandbox_request_begin(c, req->scope, req->sandbox_id, req->idempotency_key, "extend",
                                          req->request_hash, ret, tenant_id, phase, desired, NULL, &pol, err);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    rc = extend_allowed(req, &pol, phase, desired, err);
    policy_release(&pol);
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    snprintf(ttl, sizeof ttl, "%lld", (long long)req->ttl_seconds);
    extend_times_t t;
    ids_new("op", op_id);
    if (extend_move(c, req->sandbox_id, ttl, &t) < 0)
        goto db_fail;
    json_object *result = extend_json(req->ttl_seconds, &t);
    rc = extend_op_record(c, lim, req, tenant_id, op_id, result);
    if (rc == 0)
        rc = store__event_add(c, tenant_id, "sandbox.extended", req->sandbox_id, op_id, json_object_get(result));
    json_object_put(result);
    if (rc < 0 || db_commit(c) < 0) {
        bool dup = req->idempotency_key && db_last_unique_violation();
        db_rollback(c);
        if (dup) {
            /* A concurrent request with the same key won: its operation. */
            int rr = store__idem_replay(c, tenant_id, req->idempotency_key, "extend", req->request_hash, false, ret,
                                        err);
            return rr > 0 ? 0 : (rr < 0 ? rr : store__db_error(err));
        }
        return store__db_error(err);
    }
    return store__op_reply(c, NULL, op_id, ret, err);
db_fail:
    store__db_error(err);
    db_rollback(c);
    return SBX_EDB;
}
