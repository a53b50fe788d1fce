/* Pause and resume (docs/pause.md): each an operation leased to the
 * worker the sandbox is on, as an exec is; the worker's report moves the
 * sandbox between running and paused, stopping or restarting its TTL
 * clock. A paused sandbox keeps its place on the worker (its capacity stays
 * reserved), so a resume never waits for room. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store__pause_op_insert(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                           const sbx_worker_t *w, bool resume, const char *idempotency_key, const char *request_hash,
                           const char *created_by, json_object *pending_data, char ret_op_id[SBX_ID_MAX],
                           bool *ret_leased, json_object **ret_op)
{
    op_origin_t from = { .idempotency_key = idempotency_key, .request_hash = request_hash, .created_by = created_by };
    return store__worker_op_insert(c, lim, tenant_id, sandbox_id, w, resume ? "resume" : "pause", NULL, &from,
                                   pending_data, ret_op_id, ret_leased, ret_op);
}

int store__worker_op_end(PGconn *c, int rc, const char *tenant_id, const char *kind, const op_origin_t *from,
                         const char *op_id, bool leased, json_object *op, json_object **ret, api_error_t *err)
{
    if (rc < 0) {
        bool dup = from->idempotency_key && db_last_unique_violation();
        json_object_put(op);
        db_rollback(c);
        if (dup) {
            int rr = store__idem_replay(c, tenant_id, from->idempotency_key, kind, from->request_hash, false, ret, err);
            return rr > 0 ? 0 : (rr < 0 ? rr : store__db_error(err));
        }
        return store__db_error(err);
    }
    if (db_commit(c) < 0) {
        json_object_put(op);
        store__db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    if (!leased) {
        json_object_put(op);
        return store__op_reply(c, NULL, op_id, ret, err);
    }
    store__count_placed_now(kind);
    *ret = store__wrap("operation", op);
    return 0;
}

int store__worker_op_insert(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *sandbox_id,
                            const sbx_worker_t *w, const char *kind, const char *request_text,
                            const op_origin_t *from, json_object *pending_data, char ret_op_id[SBX_ID_MAX],
                            bool *ret_leased, json_object **ret_op)
{
    ids_new("op", ret_op_id);
    json_object *pl = store__placement_here(w->name, STORE_WHY_EXEC_HERE);
    op_insert_t oi = { .id = ret_op_id, .tenant_id = tenant_id, .sandbox_id = sandbox_id,
                       .kind = kind, .idempotency_key = from->idempotency_key,
                       .request_hash = from->request_hash, .request_text = request_text, .created_by = from->created_by,
                       .deadline_seconds = lim->deadline_seconds, .state = w->id[0] ? OP_LEASED : OP_PENDING,
                       .pending_data = pending_data, .worker_id = w->id, .worker_name = w->name,
                       .lease_seconds = lim->lease_seconds, .placement = pl };
    int rc = store__op_insert(c, &oi, ret_op);
    json_object_put(pl);
    if (rc < 0)
        return rc;
    *ret_leased = oi.state == OP_LEASED;
    if (!*ret_leased && store__place_now(c, lim, ret_op_id, false) < 0) {
        json_object_put(*ret_op);
        *ret_op = NULL;
        return SBX_EDB;
    }
    return 0;
}

int store_sandbox_pause(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id, bool resume,
                        const char *idempotency_key, const char *request_hash, const char *created_by,
                        json_object **ret, api_error_t *err)
{
    const char *kind = resume ? "resume" : "pause";
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    sbx_worker_t w;
    policy_t pol;
    int rc = store__sandbox_request_begin(c, scope, sandbox_id, idempotency_key, kind, request_hash, ret, tenant_id,
                                          phase, desired, &w, &pol, err);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    policy_release(&pol);
    const char *need = resume ? "paused" : "running";
    if (strcmp(phase, need) != 0 || strcmp(desired, "running") != 0) {
        int r;
        if (strcmp(desired, "running") == 0 && !resume && strcmp(phase, "paused") == 0)
            r = api_error_set(err, API_CONFLICT, "sandbox %s is paused already (sandbox resume %s runs it again)",
                              sandbox_id, sandbox_id);
        else if (strcmp(desired, "running") == 0 && resume && strcmp(phase, "running") == 0)
            r = api_error_set(err, API_CONFLICT, "sandbox %s is running, not paused", sandbox_id);
        else
            r = store__not_running(c, sandbox_id, phase, desired, resume ? "a resume" : "a pause", err);
        db_rollback(c);
        return r;
    }
    if ((rc = store__refuse_if_away(c, &w, kind, sandbox_id, err)) < 0)
        return rc;
    /* One pause or resume at a time; the class must have them. */
    PGresult *r = db_exec(c,
                          "SELECT s.isolation, (SELECT o.id FROM operations o WHERE o.sandbox_id = s.id "
                          "  AND o.kind IN ('pause', 'resume', 'network') AND o.state IN ('pending', 'admitted', 'leased', "
                          "  'running') ORDER BY o.created_at LIMIT 1) FROM sandboxes s WHERE s.id = $1",
                          1, (const char *const[]){ sandbox_id });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return store__db_error(err);
    }
    char iso[16], open_op[SBX_ID_MAX] = "";
    snprintf(iso, sizeof iso, "%s", db_get(r, 0, 0));
    if (db_get(r, 0, 1))
        snprintf(open_op, sizeof open_op, "%s", db_get(r, 0, 1));
    PQclear(r);
    if (*open_op) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "sandbox %s has a pause, resume or network change in progress "
                             "(operation %s): wait for it (sandbox wait %s)", sandbox_id, open_op, open_op);
    }
    if (strcmp(iso, "container") != 0 && strcmp(iso, "gvisor") != 0 && strcmp(iso, "microvm") != 0) {
        db_rollback(c);
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "sandbox %s runs as %s: it cannot be paused",
                             sandbox_id, iso);
    }
    json_object *op = NULL;
    bool leased = false;
    rc = store__pause_op_insert(c, lim, tenant_id, sandbox_id, &w, resume, idempotency_key, request_hash, created_by,
                                NULL, op_id, &leased, &op);
    op_origin_t from_ = { .idempotency_key = idempotency_key, .request_hash = request_hash, .created_by = created_by };
    return store__worker_op_end(c, rc, tenant_id, kind, &from_, op_id, leased, op, ret, err);
}

int store__sandbox_paused(PGconn *c, const char *sandbox_id, bool resumed, json_object *result)
{
    int rc;
    if (resumed) {
        /* the seconds it had left; none left (paused by its TTL): its whole
         * TTL again */
        rc = store__sandbox_set_phase_if(c, sandbox_id, PH_RUNNING, "paused",
                                           "expires_at = CASE WHEN paused_ttl_seconds IS NULL THEN NULL "
                                           "  ELSE now() + make_interval(secs => CASE WHEN paused_ttl_seconds > 0 "
                                           "    THEN paused_ttl_seconds ELSE ttl_seconds END) END, "
                                           "paused_at = NULL, paused_ttl_seconds = NULL, pause_memory = NULL",
                                           0, NULL, NULL);
        return rc == SBX_ENOTFOUND ? 0 : rc;
    }
    bool memory = false;
    jsonx_get_bool(result, "memory", &memory);
    json_object *ed = json_object_new_object();
    jsonx_add_bool(ed, "memory", memory);
    const char *x[] = { memory ? "true" : "false" };
    /* its TTL clock stops: the seconds left are kept for the resume */
    rc = store__sandbox_set_phase_if(c, sandbox_id, PH_PAUSED, "running",
                                       "paused_at = now(), pause_memory = $3::boolean, paused_ttl_seconds = CASE "
                                       "WHEN expires_at IS NULL THEN NULL ELSE greatest(0, ceil(extract(epoch FROM "
                                       "expires_at - now())))::bigint END, expires_at = NULL",
                                       1, x, ed);
    return rc == SBX_ENOTFOUND ? 0 : rc;
}
