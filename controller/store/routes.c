/* Public routes: share, unshare, list, expiry and the route listener's lookup. */
#include "store_int.h"

/* ---- routes ---- */

/* Inserts a pending operation of kind on the locked sandbox, with its
 * event. */
static int op_insert_pending(PGconn *c, const store_limits_t *lim, const char *kind, const char *tenant_id,
                             const char *sandbox_id, const char *op_id, json_object *request, const char *idem,
                             const char *hash, const char *created_by)
{
    char deadline[24];
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    char *req_text = jsonx_dump(request);
    const char *po[] = { op_id, tenant_id, sandbox_id, kind, idem, hash, req_text, deadline, created_by };
    int rc = db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, idempotency_key, "
                       "request_hash, request, deadline, created_by) VALUES ($1, $2, $3, $4, 'pending', $5, $6, "
                       "$7::jsonb, now() + make_interval(secs => $8::bigint), $9)",
                    9, po);
    free(req_text);
    if (rc < 0)
        return SBX_EDB;
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", kind);
    jsonx_add_str(ed, "to", "pending");
    return store__event_add(c, tenant_id, "operation.pending", sandbox_id, op_id, ed);
}

int store_route_share(PGconn *c, const store_limits_t *lim, const share_req_t *req, json_object **ret,
                      api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    policy_t pol;
    int rc = store__sandbox_request_begin(c, req->scope, req->sandbox_id, req->idempotency_key, "share",
                                          req->request_hash, ret, tenant_id, phase, desired, NULL, &pol, err);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    bool routes_denied = pol.routes == 0;
    policy_release(&pol);
    if (strcmp(phase, "running") != 0 || strcmp(desired, "running") != 0) {
        int r = store__not_running(c, req->sandbox_id, phase, desired, "sharing a port", err);
        db_rollback(c);
        return r;
    }
    /* A worker reaches a sandbox's port from the sandbox's network
     * namespace; under gVisor the network stack is inside the sandbox. */
    const char *ip[] = { req->sandbox_id };
    PGresult *ir = db_exec(c, "SELECT isolation FROM sandboxes WHERE id = $1", 1, ip);
    if (!ir) {
        db_rollback(c);
        return store__db_error(err);
    }
    bool gvisor = PQntuples(ir) == 1 && strcmp(db_get(ir, 0, 0), "gvisor") == 0;
    PQclear(ir);
    if (gvisor) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT, "sandbox %s runs under gVisor, whose network stack is inside the "
                             "sandbox: its ports cannot be shared", req->sandbox_id);
    }
    if (routes_denied) {
        db_rollback(c);
        return api_error_set(err, API_POLICY_DENIED, "the tenant policy does not allow public routes (routes = false)");
    }
    json_object *request = json_object_new_object();
    jsonx_add_str(request, "route_id", req->route_id);
    jsonx_add_str(request, "name", req->route_name);
    jsonx_add_int(request, "port", req->port);
    jsonx_add_str(request, "auth", req->token_auth ? "token" : "public");
    jsonx_add_str(request, "secret_hash", req->token_auth ? req->secret_hash : NULL);
    jsonx_add_int(request, "ttl_seconds", req->ttl_seconds);
    ids_new("op", op_id);
    rc = op_insert_pending(c, lim, "share", tenant_id, req->sandbox_id, op_id, request, req->idempotency_key,
                           req->request_hash, req->created_by);
    json_object_put(request);
    if (rc < 0 || db_commit(c) < 0) {
        bool dup = req->idempotency_key && db_last_unique_violation();
        db_rollback(c);
        if (dup) {
            int rr = store__idem_replay(c, tenant_id, req->idempotency_key, "share", req->request_hash, false, ret, err);
            return rr > 0 ? 0 : (rr < 0 ? rr : store__db_error(err));
        }
        return store__db_error(err);
    }
    if (store__op_reply(c, NULL, op_id, ret, err) < 0)
        return SBX_EDB;
    json_object *route = json_object_new_object();
    jsonx_add_str(route, "id", req->route_id);
    jsonx_add_str(route, "name", req->route_name);
    jsonx_add_str(route, "sandbox_id", req->sandbox_id);
    jsonx_add_int(route, "port", req->port);
    jsonx_add_str(route, "auth", req->token_auth ? "token" : "public");
    jsonx_add_str(route, "state", "pending");
    jsonx_add(*ret, "route", route);
    return 0;
}

int store_route_unshare(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                        const char *route_id, const char *created_by, json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX];
    int rc = store__sandbox_begin_locked(c, scope, sandbox_id, tenant_id, phase, desired, NULL, NULL, err);
    if (rc < 0)
        return rc;
    const char *p[] = { route_id, sandbox_id };
    bool found = false;
    if (store__one_row(c, "SELECT 1 FROM routes WHERE id = $1 AND sandbox_id = $2", 2, p, &found) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    if (!found) {
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "sandbox %s has no route %.64s", sandbox_id, route_id);
    }
    json_object *request = json_object_new_object();
    jsonx_add_str(request, "route_id", route_id);
    ids_new("op", op_id);
    rc = op_insert_pending(c, lim, "unshare", tenant_id, sandbox_id, op_id, request, NULL, NULL, created_by);
    json_object_put(request);
    if (rc < 0 || db_commit(c) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    return store__op_reply(c, NULL, op_id, ret, err);
}

int store_routes_list(PGconn *c, const char *scope, const char *sandbox_id, bool all, json_object **ret,
                      api_error_t *err)
{
    const char *p[] = { sandbox_id, scope };
    bool found = false;
    if (store__one_row(c, "SELECT 1 FROM sandboxes WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)", 2, p,
                       &found) < 0)
        return store__db_error(err);
    if (!found)
        return api_error_set(err, API_NOT_FOUND, "no sandbox %.64s", sandbox_id);
    return store__api_list(c, &store__t_route,
                           all ? " FROM routes r WHERE r.sandbox_id = $1 ORDER BY r.created_at"
                               : " FROM routes r WHERE r.sandbox_id = $1 AND r.state = 'active' ORDER BY r.created_at",
                           1, p, "routes", ret, err);
}

/* Completes a share or unshare inside store__place_one's transaction (the
 * sandbox row is locked). Returns 1 when the operation finished. */
int store__place_route_op(PGconn *c, const char *op_id, const char *kind, const char *sbx, const char *phase,
                          const char *tenant_id)
{
    const char *q[] = { op_id };
    PGresult *r = db_exec(c, "SELECT request::text, created_by FROM operations WHERE id = $1", 1, q);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    json_object *req = store__parse_json_text(db_get(r, 0, 0));
    char created_by[SBX_ID_MAX];
    snprintf(created_by, sizeof created_by, "%s", db_get(r, 0, 1) ? db_get(r, 0, 1) : "");
    PQclear(r);
    const char *route_id = jsonx_get_str(req, "route_id");
    int rc;
    if (strcmp(kind, "unshare") == 0) {
        const char *u[] = { route_id ? route_id : "", sbx, op_id };
        rc = db_run(c, "WITH gone AS (UPDATE routes SET state = 'removed', removed_at = now(), "
                       "  removed_reason = 'unshare' WHERE id = $1 AND sandbox_id = $2 AND state = 'active' "
                       "  RETURNING id, tenant_id, port) "
                       "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) SELECT tenant_id, "
                       "  'route.removed', $2, $3, jsonb_build_object('route', id, 'port', port, 'reason', 'unshare') "
                       "FROM gone",
                    3, u);
        if (rc >= 0)
            rc = store__op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, NULL, 0, NULL, NULL);
    } else if (strcmp(phase, "running") != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "sandbox %s is %s; only a running sandbox can be shared", sbx, phase);
        rc = store__op_fail_admitted(c, op_id, kind, sbx, "conflict", msg, NULL);
    } else {
        int64_t port = 0, ttl = 0;
        jsonx_get_int(req, "port", &port);
        jsonx_get_int(req, "ttl_seconds", &ttl);
        char ports[16], ttls[24];
        snprintf(ports, sizeof ports, "%lld", (long long)port);
        snprintf(ttls, sizeof ttls, "%lld", (long long)ttl);
        const char *ins[] = { route_id ? route_id : "", jsonx_get_str(req, "name"), sbx, tenant_id, ports,
                              jsonx_get_str(req, "auth"), jsonx_get_str(req, "secret_hash"), ttls, created_by };
        r = store__exec_cols(c, &store__t_route,
                             "INSERT INTO routes AS r (id, name, sandbox_id, tenant_id, port, auth, secret_hash, "
                             "expires_at, created_by) VALUES ($1, $2, $3, $4, $5::int, $6, $7, CASE WHEN $8::bigint > 0 "
                             "THEN now() + make_interval(secs => $8::bigint) END, nullif($9, '')) RETURNING ",
                             "", 9, ins);
        rc = r && PQntuples(r) == 1 ? 0 : SBX_EDB;
        json_object *route = rc == 0 ? store__row_json(&store__t_route, r, 0) : NULL;
        if (rc == 0) {
            /* Not the route's name: it is the unguessable address. */
            json_object *ed = json_object_new_object();
            int64_t port = 0;
            jsonx_get_int(route, "port", &port);
            jsonx_add_str(ed, "route", jsonx_get_str(route, "id"));
            jsonx_add_int(ed, "port", port);
            jsonx_add_str(ed, "auth", jsonx_get_str(route, "auth"));
            jsonx_add_str(ed, "expires_at", jsonx_get_str(route, "expires_at"));
            rc = store__event_add(c, tenant_id, "route.shared", sbx, op_id, ed);
        }
        if (rc == 0) {
            json_object *res = store__wrap("route", json_object_get(route));
            char *rt = jsonx_dump(res);
            json_object_put(res);
            const char *x[] = { rt };
            rc = store__op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, "result = $4::jsonb", 1, x, NULL);
            free(rt);
        }
        if (route)
            json_object_put(route);
        PQclear(r);
    }
    if (req)
        json_object_put(req);
    return rc < 0 ? rc : 1;
}

int store_expire_routes(PGconn *c, int *ret_changed)
{
    PGresult *r = db_exec(c,
                          "WITH gone AS (UPDATE routes SET state = 'removed', removed_at = now(), "
                          "  removed_reason = 'expired' WHERE id IN (SELECT id FROM routes WHERE state = 'active' "
                          "  AND expires_at < now() ORDER BY expires_at LIMIT 500 FOR UPDATE SKIP LOCKED) "
                          "  RETURNING id, tenant_id, sandbox_id, port) "
                          "INSERT INTO events (tenant_id, kind, sandbox_id, data) "
                          "SELECT tenant_id, 'route.expired', sandbox_id, "
                          "  jsonb_build_object('route', id, 'port', port, 'reason', 'expired') FROM gone "
                          "RETURNING 1",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_changed += PQntuples(r);
    PQclear(r);
    return 0;
}

int store_route_target(PGconn *c, const char *name, route_target_t *ret)
{
    memset(ret, 0, sizeof *ret);
    const char *p[] = { name };
    PGresult *r = db_exec(c,
                          "SELECT r.id, r.sandbox_id, r.tenant_id, s.worker_id, r.port, r.auth, "
                          "  coalesce(r.secret_hash, ''), coalesce(w.route_address, ''), "
                          "  CASE WHEN " STORE_TOKEN_LIVE("t") " "
                          "       THEN coalesce(t.hash, '') ELSE '' END, "
                          "  coalesce((tn.policy->>'max_worker_connections')::bigint, 0), "
                          "  CASE WHEN w.state = 'unreachable' THEN coalesce(w.unreachable_reason, 'unreachable') "
                          "    ELSE '' END, s.phase = 'paused' "
                          "FROM routes r JOIN sandboxes s ON s.id = r.sandbox_id "
                          "JOIN tenants tn ON tn.id = r.tenant_id "
                          "JOIN workers w ON w.id = s.worker_id "
                          "LEFT JOIN api_tokens t ON t.id = w.token_id "
                          "WHERE r.name = $1 AND r.state = 'active' AND (r.expires_at IS NULL OR r.expires_at > now()) "
                          "  AND s.phase IN ('running', 'paused') AND w.state <> 'lost'",
                          1, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0) {
        snprintf(ret->route_id, sizeof ret->route_id, "%s", db_get(r, 0, 0));
        snprintf(ret->sandbox_id, sizeof ret->sandbox_id, "%s", db_get(r, 0, 1));
        snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 2));
        snprintf(ret->worker_id, sizeof ret->worker_id, "%s", db_get(r, 0, 3));
        ret->port = (int)db_get_ll(r, 0, 4);
        ret->token_auth = strcmp(db_get(r, 0, 5), "token") == 0;
        snprintf(ret->secret_hash, sizeof ret->secret_hash, "%s", db_get(r, 0, 6));
        snprintf(ret->worker_address, sizeof ret->worker_address, "%s", db_get(r, 0, 7));
        snprintf(ret->worker_token_hash, sizeof ret->worker_token_hash, "%s", db_get(r, 0, 8));
        ret->max_worker_connections = db_get_ll(r, 0, 9);
        snprintf(ret->unreachable, sizeof ret->unreachable, "%s", db_get(r, 0, 10));
        ret->paused = db_get_bool(r, 0, 11);
    }
    PQclear(r);
    return rc;
}

int store_port_target(PGconn *c, const char *sandbox_id, int port, route_target_t *ret, bool *ret_routes_allowed)
{
    memset(ret, 0, sizeof *ret);
    *ret_routes_allowed = false;
    const char *p[] = { sandbox_id };
    PGresult *r = db_exec(c,
                          "SELECT s.id, s.tenant_id, s.worker_id, coalesce(w.route_address, ''), "
                          "  CASE WHEN " STORE_TOKEN_LIVE("t") " "
                          "       THEN coalesce(t.hash, '') ELSE '' END, "
                          "  coalesce((tn.policy->>'max_worker_connections')::bigint, 0), "
                          "  CASE WHEN w.state = 'unreachable' THEN coalesce(w.unreachable_reason, 'unreachable') "
                          "    ELSE '' END, "
                          "  coalesce((tn.policy->>'routes')::boolean, true), s.phase = 'paused' "
                          "FROM sandboxes s JOIN tenants tn ON tn.id = s.tenant_id "
                          "JOIN workers w ON w.id = s.worker_id "
                          "LEFT JOIN api_tokens t ON t.id = w.token_id "
                          "WHERE s.id = $1 AND s.phase IN ('running', 'paused') AND w.state <> 'lost'",
                          1, p);
    if (!r)
        return SBX_EDB;
    int rc = PQntuples(r) == 1 ? 0 : SBX_ENOTFOUND;
    if (rc == 0) {
        snprintf(ret->sandbox_id, sizeof ret->sandbox_id, "%s", db_get(r, 0, 0));
        snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 1));
        snprintf(ret->worker_id, sizeof ret->worker_id, "%s", db_get(r, 0, 2));
        ret->port = port;
        ret->token_auth = true;
        snprintf(ret->worker_address, sizeof ret->worker_address, "%s", db_get(r, 0, 3));
        snprintf(ret->worker_token_hash, sizeof ret->worker_token_hash, "%s", db_get(r, 0, 4));
        ret->max_worker_connections = db_get_ll(r, 0, 5);
        snprintf(ret->unreachable, sizeof ret->unreachable, "%s", db_get(r, 0, 6));
        *ret_routes_allowed = strcmp(db_get(r, 0, 7), "t") == 0;
        ret->paused = db_get_bool(r, 0, 8);
    }
    PQclear(r);
    return rc;
}

int store_sandboxes_running(PGconn *c, const char *const *ids, int n, bool *ret_flags)
{
    return store__flag_ids(c, "SELECT id FROM sandboxes WHERE id = ANY($1::text[]) AND phase = 'running'", ids, n,
                           ret_flags);
}

int store_routes_alive(PGconn *c, const char *const *names, int n, bool *ret_flags)
{
    return store__flag_ids(c, "SELECT name FROM routes WHERE name = ANY($1::text[]) AND state = 'active' "
                       "AND (expires_at IS NULL OR expires_at > now())", names, n, ret_flags);
}
