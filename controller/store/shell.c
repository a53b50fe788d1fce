/* A shell session (sandbox shell), or a process an E2B client ran (via
 * "e2b", reported by the worker), recorded when it ends: an exec operation
 * the controller completes alone, created, admitted and succeeded in one
 * transaction with its events, as an extend is. */
#include "store_int.h"

int store_shell_record(PGconn *c, const store_limits_t *lim, const shell_record_t *rec, char ret_op_id[SBX_ID_MAX],
                       api_error_t *err)
{
    char deadline[24], tenant_id[SBX_ID_MAX];
    ret_op_id[0] = '\0';
    json_object *req = json_object_new_object(), *res = json_object_new_object(), *argv = json_object_new_array();
    char *req_s = NULL, *res_s = NULL;
    int rc = SBX_EDB;
    if (!req || !res || !argv) {
        json_object_put(argv);
        rc = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < rec->argc; i++)
        json_object_array_add(argv, json_object_new_string(rec->argv[i]));
    jsonx_add(req, "argv", argv);
    jsonx_add_bool(req, "tty", rec->tty);
    if (rec->via)
        jsonx_add_str(req, "via", rec->via);
    jsonx_add_int(res, "exit_code", rec->exit_code);
    jsonx_add_int(res, "duration_ms", rec->duration_ms);
    req_s = jsonx_dump(req);
    res_s = jsonx_dump(res);
    if (!req_s || !res_s) {
        rc = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    if (db_begin(c) < 0) {
        rc = store__db_error(err);
        goto cleanup;
    }
    const char *ps[] = { rec->sandbox_id, rec->worker_id ? rec->worker_id : "" };
    PGresult *r = db_exec(c, "SELECT tenant_id FROM sandboxes WHERE id = $1 AND ($2 = '' OR worker_id = $2)", 2, ps);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        rc = r ? api_error_set(err, API_NOT_FOUND, "no sandbox %s", rec->sandbox_id) : store__db_error(err);
        goto cleanup;
    }
    snprintf(tenant_id, sizeof tenant_id, "%s", db_get(r, 0, 0));
    PQclear(r);
    char op_id[SBX_ID_MAX];
    ids_new("op", op_id);
    snprintf(deadline, sizeof deadline, "%lld", (long long)lim->deadline_seconds);
    const char *po[] = { op_id, tenant_id, rec->sandbox_id, req_s, deadline, rec->created_by };
    rc = db_run(c, "INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, request, deadline, created_by) "
                   "VALUES ($1, $2, $3, 'exec', 'pending', $4::jsonb, now() + make_interval(secs => $5::bigint), $6)",
                6, po);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "kind", "exec");
    jsonx_add_str(ed, "to", "pending");
    if (rc == 0)
        rc = store__event_add(c, tenant_id, "operation.pending", rec->sandbox_id, op_id, ed);
    else
        json_object_put(ed);
    const char *x[] = { res_s };
    if (rc == 0)
        rc = store__op_cas(c, op_id, OP_PENDING, OP_ADMITTED, NULL, 0, NULL, NULL);
    if (rc == 0)
        rc = store__op_cas(c, op_id, OP_ADMITTED, OP_SUCCEEDED, "result = $4::jsonb", 1, x, NULL);
    json_object *sd;
    if (!rec->via) {
        sd = json_object_get(res);
    } else {
        sd = json_object_new_object();
        jsonx_add_int(sd, "exit_code", rec->exit_code);
        jsonx_add_int(sd, "duration_ms", rec->duration_ms);
        jsonx_add_str(sd, "via", rec->via);
    }
    if (rc == 0)
        rc = store__event_add(c, tenant_id, "sandbox.shell", rec->sandbox_id, op_id, sd);
    else
        json_object_put(sd);
    if (rc < 0 || db_commit(c) < 0) {
        db_rollback(c);
        rc = store__db_error(err);
        goto cleanup;
    }
    snprintf(ret_op_id, SBX_ID_MAX, "%s", op_id);
    rc = 0;
cleanup:
    json_object_put(req);
    json_object_put(res);
    free(req_s);
    free(res_s);
    return rc;
}
