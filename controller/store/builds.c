/* Template builds the server drives (docs/templates.md, migration 0030): a
 * build sandbox, a list of exec requests run in it in order, a snapshot of
 * it as the template's next version, then its delete. The reconcile loop
 * calls store_builds_drive, which moves each unfinished build on by at most
 * one operation per call, through the same store functions the API uses
 * (exec, snapshot, delete), as the tenant and the token that asked for the
 * build. Each operation is made with an idempotency key of the build's
 * (tb-ID-N, tb-ID-snapshot, tb-ID-delete) and noted on the build's row by a
 * compare-and-set on (step, operation_id): two controllers, or one that died
 * between making an operation and noting it, make the same operation again
 * and only one note lands. */
#include "store_int.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUILD_FROM " FROM template_builds b JOIN tenants tn ON tn.id = b.tenant_id "

static const store_col_t build_cols[] = {
    { "id", "b.id", COL_TEXT },
    { "template", "b.template", COL_TEXT },
    { "tenant", "tn.name", COL_TEXT },
    { "state", "b.state", COL_TEXT },
    { "sandbox_id", "b.sandbox_id", COL_TEXT_OMIT },
    { "steps_total", "jsonb_array_length(b.steps)", COL_INT },
    { "steps_started", "b.step", COL_INT },
    { "steps", "b.results::text", COL_JSON },
    { "step_names", "b.step_names::text", COL_JSON_OMIT },
    { "operation_id", "b.operation_id", COL_TEXT_OMIT },
    { "snapshot_id", "b.snapshot_id", COL_TEXT_OMIT },
    { "version", "b.version::text", COL_JSON_OMIT },
    { "config", "b.config::text", COL_JSON_OMIT },
    { "error",
      "CASE WHEN b.error_code IS NOT NULL THEN json_build_object('code', b.error_code, 'message', "
      "  b.error_message)::text END",
      COL_JSON_OMIT },
    { "cleaned", "b.cleaned", COL_BOOL },
    { "created_at", TS("b.created_at"), COL_TEXT },
    { "finished_at", TS("b.finished_at"), COL_TEXT_OMIT },
};
store_table_t store__t_build = { build_cols, (int)(sizeof build_cols / sizeof build_cols[0]), NULL, NULL };

/* {"build":…} of the build id just made. */
static int build_fetch(PGconn *c, const char *id, json_object **ret, api_error_t *err)
{
    json_object *row = NULL;
    if (store__fetch_one(c, &store__t_build, BUILD_FROM "WHERE b.id = $1", 1, (const char *const[]){ id }, &row) < 0)
        return store__db_error(err);
    *ret = store__wrap("build", row);
    return 0;
}

int store_build_active_count(PGconn *c, const char *tenant_id, int64_t *ret)
{
    PGresult *r = db_exec(c, "SELECT count(*) FROM template_builds WHERE tenant_id = $1 AND NOT cleaned", 1,
                          (const char *const[]){ tenant_id });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    *ret = db_get_ll(r, 0, 0);
    PQclear(r);
    return 0;
}

int store_build_by_key(PGconn *c, const char *tenant_id, const char *key, const char *template_name,
                       json_object *steps, json_object *config, json_object **ret, api_error_t *err)
{
    char *st = jsonx_dump(steps), *cf = config && json_object_object_length(config) > 0 ? jsonx_dump(config) : NULL;
    const char *q[] = { tenant_id, key, template_name, st, cf };
    PGresult *r = st ? db_exec(c,
                               "SELECT template = $3 AND steps = $4::jsonb AND config IS NOT DISTINCT FROM $5::jsonb "
                               "FROM template_builds WHERE tenant_id = $1 AND idempotency_key = $2",
                               5, q)
                     : NULL;
    free(st);
    free(cf);
    if (!r)
        return SBX_EDB;
    int n = PQntuples(r);
    bool same = n == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (n != 1)
        return SBX_ENOTFOUND;
    if (!same) {
        api_error_set(err, API_CONFLICT, "Idempotency-Key %.128s was used for another build request (another "
                      "template, other steps or another config); use a new key", key);
        return SBX_ECONFLICT;
    }
    const char *p[] = { tenant_id, key };
    int rc = store__fetch_one(c, &store__t_build, BUILD_FROM "WHERE b.tenant_id = $1 AND b.idempotency_key = $2", 2,
                              p, ret);
    if (rc == 0)
        *ret = store__wrap("build", *ret);
    return rc;
}

int store_build_cancel(PGconn *c, const char *tenant_id, const char *template_name, const char *build_id,
                       const char *by, json_object **ret, api_error_t *err)
{
    char msg[160];
    snprintf(msg, sizeof msg, "cancelled by %s", by && *by ? by : "the tenant");
    const char *p[] = { tenant_id, template_name, build_id, msg };
    /* the driver's compare-and-set wants building or snapshotting: a step
     * it makes meanwhile lands nowhere, and goes with the sandbox */
    PGresult *r = db_exec(c,
                          "UPDATE template_builds SET state = 'cancelled', error_code = 'cancelled', "
                          "  error_message = $4, operation_id = NULL, cleaned = sandbox_id IS NULL, "
                          "  finished_at = now(), updated_at = now() "
                          "WHERE tenant_id = $1 AND template = $2 AND id = $3 AND state IN ('waiting', 'building')",
                          4, p);
    if (!r)
        return store__db_error(err);
    PQclear(r);
    json_object *got = NULL;
    int rc = store_build_get(c, tenant_id, template_name, build_id, &got, err);
    if (rc < 0)
        return rc;
    const char *state = jsonx_get_str(jsonx_get_obj(got, "build"), "state");
    if (state && strcmp(state, "cancelled") != 0) {
        bool saving = strcmp(state, "snapshotting") == 0;
        api_error_set(err, API_CONFLICT, saving ? "build %s is saving its version (snapshotting): it ends in "
                                                  "moments; delete the version after if it is not wanted"
                                                : "build %s has ended already (%s)",
                      build_id, state);
        json_object_put(got);
        return SBX_ECONFLICT;
    }
    *ret = got;
    return 0;
}

int store_build_create(PGconn *c, const build_req_t *b, json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX];
    ids_new("bld", id);
    char *steps = jsonx_dump(b->steps);
    char *config = b->config && json_object_object_length(b->config) > 0 ? jsonx_dump(b->config) : NULL;
    if (!steps) {
        free(config);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    const char *p[] = { id, b->tenant_id, b->template_name, steps, config, b->sandbox_id, b->create_op_id,
                        b->created_by, b->idempotency_key };
    PGresult *r = db_exec(c,
                          "INSERT INTO template_builds (id, tenant_id, template, state, steps, config, sandbox_id, "
                          "  operation_id, created_by, idempotency_key) "
                          "VALUES ($1, $2, $3, 'building', $4::jsonb, $5::jsonb, $6, $7, $8, $9)",
                          9, p);
    free(steps);
    free(config);
    if (!r) {
        /* the same key raced us: the build it made */
        if (b->idempotency_key && strcmp(db_last_sqlstate(), "23505") == 0) {
            int rc = store_build_by_key(c, b->tenant_id, b->idempotency_key, b->template_name, b->steps, b->config,
                                        ret, err);
            if (rc == 0 || rc == SBX_ECONFLICT)
                return rc;
        }
        return store__db_error(err);
    }
    PQclear(r);
    return build_fetch(c, id, ret, err);
}

int store_build_get(PGconn *c, const char *tenant_id, const char *template_name, const char *build_id,
                    json_object **ret, api_error_t *err)
{
    const char *p[] = { build_id, tenant_id, template_name };
    return store__api_get(c, &store__t_build, BUILD_FROM "WHERE b.id = $1 AND b.tenant_id = $2 AND b.template = $3", 3,
                          p, "build", build_id, ret, err);
}

int store_build_list(PGconn *c, const char *tenant_id, const char *template_name, json_object **ret,
                     api_error_t *err)
{
    const char *p[] = { tenant_id, template_name };
    return store__api_list(c, &store__t_build,
                           BUILD_FROM "WHERE b.tenant_id = $1 AND b.template = $2 ORDER BY b.created_at DESC, b.id "
                                      "LIMIT 100",
                           2, p, "builds", ret, err);
}

int store_build_waiting(PGconn *c, const char *tenant_id, const char *template_name, json_object *request,
                        const char *created_by, json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX];
    ids_new("bld", id);
    char *req = jsonx_dump(request);
    if (!req)
        return api_error_set(err, API_INTERNAL, "out of memory");
    const char *p[] = { id, tenant_id, template_name, req, created_by };
    PGresult *r = db_exec(c,
                          "INSERT INTO template_builds (id, tenant_id, template, state, steps, request, created_by) "
                          "VALUES ($1, $2, $3, 'waiting', '[]'::jsonb, $4::jsonb, $5)",
                          5, p);
    free(req);
    if (!r)
        return store__db_error(err);
    PQclear(r);
    return build_fetch(c, id, ret, err);
}

int store_build_request(PGconn *c, const char *tenant_id, const char *template_name, const char *build_id,
                        json_object **ret_request, api_error_t *err)
{
    *ret_request = NULL;
    const char *p[] = { build_id, tenant_id, template_name };
    PGresult *r = db_exec(c,
                          "SELECT state, coalesce(request, '{}'::jsonb)::text FROM template_builds "
                          "WHERE id = $1 AND tenant_id = $2 AND template = $3",
                          3, p);
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no build %.64s of template %.64s", build_id, template_name);
    }
    bool waiting = strcmp(PQgetvalue(r, 0, 0), "waiting") == 0;
    if (waiting)
        *ret_request = json_tokener_parse(PQgetvalue(r, 0, 1));
    PQclear(r);
    if (!waiting)
        return api_error_set(err, API_CONFLICT, "build %.64s was started already", build_id);
    if (!*ret_request)
        return api_error_set(err, API_INTERNAL, "build %.64s has an unreadable request", build_id);
    return 0;
}

int store_build_start(PGconn *c, const build_req_t *b, const char *build_id, json_object *step_names,
                      api_error_t *err)
{
    char *steps = jsonx_dump(b->steps);
    char *config = b->config && json_object_object_length(b->config) > 0 ? jsonx_dump(b->config) : NULL;
    char *names = step_names ? jsonx_dump(step_names) : NULL;
    const char *p[] = { build_id, b->tenant_id, steps, config, b->sandbox_id, b->create_op_id, names };
    PGresult *r = steps ? db_exec(c,
                                  "UPDATE template_builds SET state = 'building', steps = $3::jsonb, "
                                  "  config = $4::jsonb, sandbox_id = $5, operation_id = $6, step_names = $7::jsonb, "
                                  "  updated_at = now() "
                                  "WHERE id = $1 AND tenant_id = $2 AND state = 'waiting'",
                                  7, p)
                        : NULL;
    free(steps);
    free(config);
    free(names);
    if (!r)
        return store__db_error(err);
    int n = store__cmd_rows(r);
    PQclear(r);
    return n == 1 ? 0 : api_error_set(err, API_CONFLICT, "build %.64s was started already", build_id);
}

/* ---- a build's files ---- */

int store_build_file_put(PGconn *c, const char *tenant_id, const char *hash, const char *data_b64, int64_t size,
                         api_error_t *err)
{
    char sz[24];
    snprintf(sz, sizeof sz, "%lld", (long long)size);
    if (db_begin(c) < 0)
        return store__db_error(err);
    const char *p[] = { tenant_id, hash, data_b64, sz };
    /* the count under a lock of the tenant's files, so two uploads cannot both take the last place */
    PGresult *r = db_exec(c,
                          "SELECT pg_advisory_xact_lock(hashtext('sandbox.build_files:' || $1)), "
                          "  (SELECT count(*) FROM build_files WHERE tenant_id = $1 AND hash <> $2)",
                          2, p);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return store__db_error(err);
    }
    long long n = db_get_ll(r, 0, 1);
    PQclear(r);
    if (n >= SBX_BUILD_FILES_MAX) {
        db_rollback(c);
        return api_error_set(err, API_QUOTA_EXCEEDED, "the tenant keeps %d build files at most (each is kept a day "
                             "after its last use)", SBX_BUILD_FILES_MAX);
    }
    if (db_run(c,
               "INSERT INTO build_files (tenant_id, hash, data_b64, size_bytes) VALUES ($1, $2, $3, $4::integer) "
               "ON CONFLICT (tenant_id, hash) DO UPDATE SET data_b64 = EXCLUDED.data_b64, "
               "  size_bytes = EXCLUDED.size_bytes, used_at = now()",
               4, p) < 0 ||
        db_commit(c) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    return 0;
}

int store_build_file_has(PGconn *c, const char *tenant_id, const char *hash, bool *ret)
{
    PGresult *r = db_exec(c, "SELECT 1 FROM build_files WHERE tenant_id = $1 AND hash = $2", 2,
                          (const char *const[]){ tenant_id, hash });
    if (!r)
        return SBX_EDB;
    *ret = PQntuples(r) == 1;
    PQclear(r);
    return 0;
}

int store_build_file_get(PGconn *c, const char *tenant_id, const char *hash, char **ret_b64, int64_t *ret_size)
{
    PGresult *r = db_exec(c,
                          "UPDATE build_files SET used_at = now() WHERE tenant_id = $1 AND hash = $2 "
                          "RETURNING data_b64, size_bytes",
                          2, (const char *const[]){ tenant_id, hash });
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    *ret_b64 = strdup(PQgetvalue(r, 0, 0));
    *ret_size = db_get_ll(r, 0, 1);
    PQclear(r);
    return *ret_b64 ? 0 : SBX_ENOMEM;
}

/* ---- the driver ---- */

typedef struct build_row {
    char id[SBX_ID_MAX], tenant_id[SBX_ID_MAX], sandbox_id[SBX_ID_MAX], op_id[SBX_ID_MAX];
    char template_name[SBX_SNAPSHOT_NAME_MAX + 1], state[16], created_by[SBX_ID_MAX];
    int64_t step, nsteps;
    json_object *steps, *config; /* owned */
} build_row_t;

static void build_row_release(build_row_t *b)
{
    json_object_put(b->steps);
    json_object_put(b->config);
}

/* A request hash that is the same every time the driver asks for the same
 * thing (the idempotency key's replay needs it). */
static void build_hash(const char *build_id, const char *what, char out[65])
{
    unsigned char h[32];
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const unsigned char *)"template_build", 15);
    crypto_generichash_update(&st, (const unsigned char *)build_id, strlen(build_id) + 1);
    crypto_generichash_update(&st, (const unsigned char *)what, strlen(what) + 1);
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(out, 65, h, sizeof h);
}

/* Ends the build as failed (state building or snapshotting only): 0 or SBX_EDB. */
static int build_fail(PGconn *c, const build_row_t *b, const char *code, const char *msg)
{
    const char *p[] = { b->id, code, msg };
    PGresult *r = db_exec(c,
                          "UPDATE template_builds SET state = 'failed', error_code = $2, error_message = $3, "
                          "  operation_id = NULL, finished_at = now(), updated_at = now() "
                          "WHERE id = $1 AND state IN ('building', 'snapshotting')",
                          3, p);
    if (!r)
        return SBX_EDB;
    PQclear(r);
    return 0;
}

/* The compare-and-set every step's note goes through: set (SQL, $3.. its
 * params) lands only while the row still has step and op_id. 1 landed, 0
 * someone else moved it, SBX_EDB. */
static int build_cas(PGconn *c, const build_row_t *b, const char *set, int nextra, const char *const *extra)
{
    char sql[768], step[24];
    snprintf(step, sizeof step, "%lld", (long long)b->step);
    snprintf(sql, sizeof sql,
             "UPDATE template_builds SET %s, updated_at = now() WHERE id = $1 AND step = $2::integer AND "
             "coalesce(operation_id, '') = $%d AND NOT cleaned AND state IN ('building', 'snapshotting')",
             set, 3 + nextra);
    const char *p[8] = { b->id, step };
    for (int i = 0; i < nextra && i < 5; i++)
        p[2 + i] = extra[i];
    p[2 + nextra] = b->op_id;
    PGresult *r = db_exec(c, sql, 3 + nextra, p);
    if (!r)
        return SBX_EDB;
    int n = store__cmd_rows(r);
    PQclear(r);
    return n > 0;
}

static int build_load(PGconn *c, const char *id, build_row_t *b)
{
    memset(b, 0, sizeof *b);
    PGresult *r = db_exec(c,
                          "SELECT id, tenant_id, template, state, steps::text, config::text, "
                          "  coalesce(sandbox_id, ''), step, coalesce(operation_id, ''), coalesce(created_by, ''), "
                          "  jsonb_array_length(steps) "
                          "FROM template_builds WHERE id = $1 AND NOT cleaned",
                          1, (const char *const[]){ id });
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SBX_ENOTFOUND;
    }
    snprintf(b->id, sizeof b->id, "%s", PQgetvalue(r, 0, 0));
    snprintf(b->tenant_id, sizeof b->tenant_id, "%s", PQgetvalue(r, 0, 1));
    snprintf(b->template_name, sizeof b->template_name, "%s", PQgetvalue(r, 0, 2));
    snprintf(b->state, sizeof b->state, "%s", PQgetvalue(r, 0, 3));
    b->steps = json_tokener_parse(PQgetvalue(r, 0, 4));
    b->config = PQgetisnull(r, 0, 5) ? NULL : json_tokener_parse(PQgetvalue(r, 0, 5));
    snprintf(b->sandbox_id, sizeof b->sandbox_id, "%s", PQgetvalue(r, 0, 6));
    b->step = db_get_ll(r, 0, 7);
    snprintf(b->op_id, sizeof b->op_id, "%s", PQgetvalue(r, 0, 8));
    snprintf(b->created_by, sizeof b->created_by, "%s", PQgetvalue(r, 0, 9));
    b->nsteps = db_get_ll(r, 0, 10);
    PQclear(r);
    return 0;
}

/* The operation the build waits on has finished: notes it. 1 moved, 0
 * still waiting, SBX_EDB. */
static int build_op_done(PGconn *c, build_row_t *b)
{
    PGresult *r = db_exec(c,
                          "SELECT kind, state, result::text, coalesce(error_code, ''), coalesce(error_message, '') "
                          "FROM operations WHERE id = $1",
                          1, (const char *const[]){ b->op_id });
    if (!r)
        return SBX_EDB;
    if (PQntuples(r) != 1) {
        PQclear(r);
        char msg[160];
        snprintf(msg, sizeof msg, "operation %s of the build is gone", b->op_id);
        return build_fail(c, b, "internal", msg) < 0 ? SBX_EDB : 1;
    }
    char kind[24], state[16], code[48], emsg[400];
    snprintf(kind, sizeof kind, "%s", PQgetvalue(r, 0, 0));
    snprintf(state, sizeof state, "%s", PQgetvalue(r, 0, 1));
    json_object *result = PQgetisnull(r, 0, 2) ? NULL : json_tokener_parse(PQgetvalue(r, 0, 2));
    snprintf(code, sizeof code, "%s", PQgetvalue(r, 0, 3));
    snprintf(emsg, sizeof emsg, "%s", PQgetvalue(r, 0, 4));
    PQclear(r);
    op_state_t st;
    int rc = 0;
    if (op_state_parse(state, &st) < 0 || !op_state_terminal(st))
        goto out; /* still under way */
    bool ok = st == OP_SUCCEEDED;
    char msg[640];
    if (strcmp(kind, "create") == 0) {
        if (ok) {
            rc = build_cas(c, b, "operation_id = NULL", 0, NULL);
        } else {
            snprintf(msg, sizeof msg, "the build sandbox %s did not start (operation %s %s: %s)", b->sandbox_id,
                     b->op_id, state, *emsg ? emsg : code);
            rc = build_fail(c, b, *code ? code : "build_failed", msg) < 0 ? SBX_EDB : 1;
        }
    } else if (strcmp(kind, "exec") == 0) {
        int64_t exit_code = -1;
        bool has_exit = jsonx_get_int(result, "exit_code", &exit_code);
        json_object *note = json_object_new_object();
        jsonx_add_str(note, "operation", b->op_id);
        jsonx_add_str(note, "state", state);
        if (has_exit)
            jsonx_add_int(note, "exit_code", exit_code);
        char *text = jsonx_dump(note);
        json_object_put(note);
        if (!text) {
            rc = SBX_ENOMEM;
            goto out;
        }
        /* step counts the steps started: this one is step - 1 */
        const char *extra[] = { text };
        rc = build_cas(c, b, "results = results || jsonb_build_array($3::jsonb), operation_id = NULL", 1, extra);
        free(text);
        if (rc == 1 && !(ok && has_exit && exit_code == 0)) {
            if (ok)
                snprintf(msg, sizeof msg, "step %lld of %lld (operation %s) exited with %lld", (long long)b->step,
                         (long long)b->nsteps, b->op_id, (long long)exit_code);
            else
                snprintf(msg, sizeof msg, "step %lld of %lld (operation %s) %s: %s", (long long)b->step,
                         (long long)b->nsteps, b->op_id, state, *emsg ? emsg : code);
            rc = build_fail(c, b, "build_failed", msg) < 0 ? SBX_EDB : 1;
        }
    } else if (strcmp(kind, "snapshot") == 0) {
        if (ok) {
            PGresult *u = db_exec(c,
                                  "UPDATE template_builds b SET state = 'ready', snapshot_id = sn.id, "
                                  "  version = sn.version, operation_id = NULL, finished_at = now(), "
                                  "  updated_at = now() FROM snapshots sn "
                                  "WHERE b.id = $1 AND b.state = 'snapshotting' AND b.operation_id = $2 "
                                  "  AND sn.operation_id = $2",
                                  2, (const char *const[]){ b->id, b->op_id });
            if (!u) {
                rc = SBX_EDB;
                goto out;
            }
            rc = store__cmd_rows(u) > 0;
            PQclear(u);
        } else {
            snprintf(msg, sizeof msg, "the snapshot of the build sandbox (operation %s) %s: %s", b->op_id, state,
                     *emsg ? emsg : code);
            rc = build_fail(c, b, *code ? code : "build_failed", msg) < 0 ? SBX_EDB : 1;
        }
    } else {
        snprintf(msg, sizeof msg, "the build waits on operation %s of kind %s", b->op_id, kind);
        rc = build_fail(c, b, "internal", msg) < 0 ? SBX_EDB : 1;
    }
out:
    json_object_put(result);
    return rc;
}

/* What an api error from a step's request means for the build: it fails,
 * naming the step. */
static int build_refused(PGconn *c, build_row_t *b, const char *what, const api_error_t *err)
{
    char msg[700];
    snprintf(msg, sizeof msg, "%s: %s", what, err->message);
    return build_fail(c, b, api_code_info(err->code)->name, msg) < 0 ? SBX_EDB : 1;
}

/* The op id out of {"operation":{"id"}} (resp taken). */
static void op_id_of(json_object *resp, char out[SBX_ID_MAX])
{
    const char *id = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    snprintf(out, SBX_ID_MAX, "%s", id ? id : "");
    json_object_put(resp);
}

/* The build acts as the token that asked for it: once that token is
 * revoked or expired, the build makes nothing more and fails (its sandbox
 * then goes). 1 failed for that, 0 the token lives (or none is named),
 * SBX_EDB. */
static int build_token_gone(PGconn *c, build_row_t *b)
{
    if (!b->created_by[0])
        return 0;
    char hash[72];
    auth_info_t info;
    int64_t left = -1;
    int rc = store_token_find(c, b->created_by, hash, &info, &left);
    if (rc == SBX_EDB)
        return SBX_EDB;
    if (rc == 0)
        return 0;
    char msg[160];
    snprintf(msg, sizeof msg, "the token that asked for the build (%s) was revoked or expired", b->created_by);
    return build_fail(c, b, "unauthorized", msg) < 0 ? SBX_EDB : 1;
}

/* One move of one build. 1 moved, 0 nothing to do now, SBX_EDB. */
static int build_move(PGconn *c, const store_limits_t *lim, const char *id)
{
    build_row_t b;
    int rc = build_load(c, id, &b);
    if (rc < 0)
        return rc == SBX_ENOTFOUND ? 0 : rc;
    json_object *resp = NULL;
    api_error_t err;
    char key[SBX_ID_MAX + 32], hash[65], op[SBX_ID_MAX];
    const char *by = b.created_by[0] ? b.created_by : NULL;
    bool building = strcmp(b.state, "building") == 0, snapshotting = strcmp(b.state, "snapshotting") == 0;
    if (strcmp(b.state, "waiting") == 0) {
        /* asked for and never started (E2B's two calls): gone after an hour */
        PGresult *u = db_exec(c,
                              "UPDATE template_builds SET state = 'failed', error_code = 'timeout', error_message = "
                              "  'the build was never started (no steps came within " SBX_BUILD_WAITING_TEXT ")', "
                              "  cleaned = true, finished_at = now(), updated_at = now() "
                              "WHERE id = $1 AND state = 'waiting' AND created_at < now() - make_interval(secs => "
                              "  " SBX_BUILD_WAITING_SQL ")",
                              1, (const char *const[]){ b.id });
        rc = u ? store__cmd_rows(u) > 0 : SBX_EDB;
        PQclear(u);
    } else if ((building || snapshotting) && b.op_id[0]) {
        rc = build_op_done(c, &b);
    } else if (building && (rc = build_token_gone(c, &b)) != 0) {
        /* failed for it (or a database error) */
    } else if (building && b.step < b.nsteps) {
        json_object *req = json_object_array_get_idx(b.steps, (size_t)b.step);
        char what[32];
        snprintf(what, sizeof what, "step-%lld", (long long)b.step);
        snprintf(key, sizeof key, "tb-%s-%lld", b.id, (long long)b.step);
        build_hash(b.id, what, hash);
        if (!req) {
            rc = build_fail(c, &b, "internal", "a step of the build is not an exec request") < 0 ? SBX_EDB : 1;
        } else if ((rc = store_exec_create(c, lim, b.tenant_id, b.sandbox_id, req, key, hash, by, &resp, &err)) < 0) {
            char why[64];
            snprintf(why, sizeof why, "step %lld of %lld", (long long)b.step + 1, (long long)b.nsteps);
            rc = rc == SBX_EDB ? SBX_EDB : build_refused(c, &b, why, &err);
        } else {
            op_id_of(resp, op);
            const char *extra[] = { op };
            rc = build_cas(c, &b, "step = step + 1, operation_id = $3", 1, extra);
        }
    } else if (building) {
        snprintf(key, sizeof key, "tb-%s-snapshot", b.id);
        build_hash(b.id, "snapshot", hash);
        if ((rc = store_snapshot_create(c, lim, b.tenant_id, b.sandbox_id, NULL, b.template_name, b.config, false, key,
                                        hash, by, &resp, &err)) < 0) {
            rc = rc == SBX_EDB ? SBX_EDB : build_refused(c, &b, "the snapshot of the build sandbox", &err);
        } else {
            op_id_of(resp, op);
            const char *extra[] = { op };
            rc = build_cas(c, &b, "state = 'snapshotting', operation_id = $3", 1, extra);
        }
    } else if (!snapshotting && !b.sandbox_id[0]) {
        rc = 0; /* never had one */
    } else if (!snapshotting) {
        /* ready, failed or cancelled: its build sandbox goes */
        snprintf(key, sizeof key, "tb-%s-delete", b.id);
        build_hash(b.id, "delete", hash);
        rc = store_sandbox_delete(c, lim, b.tenant_id, b.sandbox_id, key, hash, by, &resp, &err);
        json_object_put(resp);
        /* gone already (deleted, expired, pruned) is as good */
        if (rc == SBX_EDB)
            goto done;
        PGresult *u = db_exec(c, "UPDATE template_builds SET cleaned = true, updated_at = now() WHERE id = $1", 1,
                              (const char *const[]){ b.id });
        if (!u) {
            rc = SBX_EDB;
            goto done;
        }
        PQclear(u);
        rc = 1;
    } else {
        rc = build_fail(c, &b, "internal", "the build lost track of its snapshot") < 0 ? SBX_EDB : 1;
    }
done:
    build_row_release(&b);
    return rc < 0 ? rc : rc > 0;
}

int store_builds_drive(PGconn *c, const store_limits_t *lim, int *ret_changed, bool *ret_active)
{
    PGresult *r = db_exec(c,
                          "SELECT id FROM template_builds WHERE NOT cleaned ORDER BY created_at LIMIT "
                          "64",
                          0, NULL);
    if (!r)
        return SBX_EDB;
    int n = PQntuples(r), rc = 0;
    *ret_active = n > 0;
    for (int i = 0; i < n && rc >= 0; i++) {
        char id[SBX_ID_MAX];
        snprintf(id, sizeof id, "%s", PQgetvalue(r, i, 0));
        /* a build moves as far as it can now, a few steps at most */
        for (int k = 0; k < 4; k++) {
            int m = build_move(c, lim, id);
            if (m < 0) {
                rc = m;
                break;
            }
            if (m == 0)
                break;
            *ret_changed += 1;
        }
    }
    PQclear(r);
    return rc < 0 ? rc : 0;
}
