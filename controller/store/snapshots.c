/* Snapshots: a tenant's saved sandbox filesystems (docs/snapshots.md).
 * Making one is an operation of kind 'snapshot' leased to the worker the
 * sandbox runs on; a row per snapshot says whose it is and where its bytes
 * are; deleting one marks the row, and the worker's next heartbeat is told
 * to remove the bytes (as it is for every snapshot no live row wants). */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The snapshot an operation makes, added to a reply as "snapshot" (absent
 * when the row is not found). */
static void reply_add_snapshot(PGconn *c, const char *op_id, json_object *reply)
{
    json_object *sn = NULL;
    if (op_id && store__fetch_one(c, &store__t_snapshot, SNAPSHOT_FROM "WHERE sn.operation_id = $1", 1,
                                  (const char *const[]){ op_id }, &sn) == 0)
        jsonx_add(reply, "snapshot", sn);
}

/* The tenant's snapshot quota, in the caller's transaction (serialized per
 * tenant by an advisory lock held to its end): 0, or SBX_EINVAL with err
 * (quota_exceeded, or snapshots off), SBX_EDB. */
static int snapshot_quota(PGconn *c, const store_limits_t *lim, const char *tenant_id, const policy_t *pol,
                          api_error_t *err)
{
    if (lim->max_snapshots <= 0)
        return api_error_set(err, API_POLICY_DENIED, "snapshots are off on this server (max_snapshots = 0)");
    int64_t max_n = policy_tighter(lim->max_snapshots, pol->max_snapshots);
    int64_t max_mib = policy_tighter(lim->max_snapshot_mib, pol->max_snapshot_mib);
    const char *p[] = { tenant_id };
    PGresult *r = db_exec(c,
                          "SELECT pg_advisory_xact_lock(hashtext('sandbox.snapshots:' || $1)), "
                          "  (SELECT count(*) FROM snapshots sn LEFT JOIN operations o ON o.id = sn.operation_id "
                          "    WHERE sn.tenant_id = $1 AND sn.deleted_at IS NULL AND (" STORE_SNAPSHOT_STATE
                          ") <> 'failed'), "
                          "  (SELECT coalesce(sum(size_bytes), 0) FROM snapshots "
                          "    WHERE tenant_id = $1 AND deleted_at IS NULL AND ready_at IS NOT NULL)",
                          1, p);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    long long n = db_get_ll(r, 0, 1), bytes = db_get_ll(r, 0, 2);
    PQclear(r);
    if (n >= max_n)
        return api_error_set(err, API_QUOTA_EXCEEDED,
                             "tenant quota max_snapshots = %lld: %lld snapshot%s kept; delete one first (sandbox "
                             "snapshots delete NAME)",
                             (long long)max_n, n, n == 1 ? "" : "s");
    if (max_mib > 0 && bytes >= max_mib * 1024 * 1024)
        return api_error_set(err, API_QUOTA_EXCEEDED,
                             "tenant quota max_snapshot_mib = %lld: its snapshots hold %lld MiB; delete one first "
                             "(sandbox snapshots delete NAME)",
                             (long long)max_mib, bytes / (1024 * 1024));
    return 0;
}

int store_snapshot_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *sandbox_id,
                          const char *name, const char *template_name, json_object *config, bool memory,
                          const char *idempotency_key, const char *request_hash, const char *created_by,
                          json_object **ret, api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], phase[24], desired[16], op_id[SBX_ID_MAX], snp_id[SBX_ID_MAX];
    sbx_worker_t w;
    policy_t pol;
    int rc = store__sandbox_request_begin(c, scope, sandbox_id, idempotency_key, "snapshot", request_hash, ret,
                                          tenant_id, phase, desired, &w, &pol, err);
    if (rc > 0) {
        reply_add_snapshot(c, jsonx_get_str(jsonx_get_obj(*ret, "operation"), "id"), *ret);
        return 0;
    }
    if (rc != 0)
        return rc;
    /* A paused sandbox's files are all there (container, gvisor): it may
     * be snapshotted, and so forked, without a resume. */
    if ((strcmp(phase, "running") != 0 && strcmp(phase, "paused") != 0) || strcmp(desired, "running") != 0) {
        policy_release(&pol);
        int r = store__not_running(c, sandbox_id, phase, desired, "a snapshot", err);
        db_rollback(c);
        return r;
    }
    if ((rc = store__refuse_if_away(c, &w, "snapshot", sandbox_id, err)) < 0) {
        policy_release(&pol);
        return rc;
    }
    char iso[16] = "", image[SBX_MAX_IMAGE_BYTES + 1] = "";
    long long nvol = 0;
    PGresult *s = db_exec(c, "SELECT isolation, spec->>'image', CASE WHEN jsonb_typeof(spec->'volumes') = 'array' "
                             "  THEN jsonb_array_length(spec->'volumes') ELSE 0 END FROM sandboxes WHERE id = $1", 1,
                          (const char *const[]){ sandbox_id });
    if (s && PQntuples(s) == 1) {
        snprintf(iso, sizeof iso, "%s", db_get(s, 0, 0) ? db_get(s, 0, 0) : "");
        snprintf(image, sizeof image, "%s", db_get(s, 0, 1) ? db_get(s, 0, 1) : "");
        nvol = db_get_ll(s, 0, 2);
    }
    PQclear(s);
    if (memory && (strcmp(iso, "microvm") != 0 || nvol > 0)) {
        db_rollback(c);
        policy_release(&pol);
        return strcmp(iso, "microvm") != 0
                   ? api_error_set(err, API_INVALID_ARGUMENT, "memory: sandbox %s runs as %s; a snapshot keeps a "
                                   "sandbox's memory only on microvm (snapshot it without memory: its files are "
                                   "kept)", sandbox_id, *iso ? iso : "?")
                   : api_error_set(err, API_INVALID_ARGUMENT, "memory: sandbox %s has volumes, which a machine "
                                   "restored from its memory could not get back; snapshot it without memory",
                                   sandbox_id);
    }
    if (!*iso || !*image) {
        db_rollback(c);
        policy_release(&pol);
        return store__db_error(err);
    }
    isolation_t icls;
    if (isolation_parse(iso, &icls) < 0) {
        db_rollback(c);
        policy_release(&pol);
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "sandbox %s runs as %s: no snapshots of that class",
                             sandbox_id, iso);
    }
    rc = snapshot_quota(c, lim, tenant_id, &pol, err);
    policy_release(&pol);
    if (rc < 0) {
        db_rollback(c);
        return rc == SBX_EDB ? store__db_error(err) : rc;
    }
    /* A failed snapshot gives its name up to the next. */
    if (name && db_run(c,
                       "UPDATE snapshots sn SET deleted_at = now() FROM (SELECT sn.id" SNAPSHOT_FROM
                       "  WHERE sn.tenant_id = $1 AND sn.name = $2 AND sn.deleted_at IS NULL AND (" STORE_SNAPSHOT_STATE
                       ") = 'failed') f WHERE sn.id = f.id",
                       2, (const char *const[]){ tenant_id, name }) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    ids_new("snp", snp_id);
    ids_new("op", op_id);
    json_object *req = json_object_new_object();
    jsonx_add_str(req, "snapshot_id", snp_id);
    if (name)
        jsonx_add_str(req, "name", name);
    if (template_name)
        jsonx_add_str(req, "template", template_name);
    if (config && json_object_object_length(config) > 0)
        jsonx_add(req, "config", json_object_get(config));
    if (memory)
        jsonx_add_bool(req, "memory", true);
    char *req_text = jsonx_dump(req);
    json_object_put(req);
    char *config_text = config && json_object_object_length(config) > 0 ? jsonx_dump(config) : NULL;
    /* a template's next version (never reused: deleted ones count), under
     * the tenant's snapshot lock snapshot_quota took */
    const char *p[] = { snp_id, tenant_id, name, sandbox_id, w.id[0] ? w.id : NULL, op_id, image, iso, created_by,
                        template_name, config_text };
    int ins = db_run(c,
                     "INSERT INTO snapshots (id, tenant_id, name, sandbox_id, worker_id, operation_id, image, isolation, "
                     "created_by, template, version, config) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
                     "CASE WHEN $10::text IS NULL THEN NULL ELSE (SELECT coalesce(max(version), 0) + 1 FROM snapshots "
                     "  WHERE tenant_id = $2 AND template = $10) END, $11::jsonb)",
                     11, p);
    free(config_text);
    if (ins < 0) {
        bool dup = db_last_unique_violation();
        free(req_text);
        db_rollback(c);
        if (dup)
            return api_error_set(err, API_CONFLICT,
                                 "tenant already has a snapshot named %s: pick another name, or delete it first "
                                 "(sandbox snapshots delete %s)",
                                 name ? name : "?", name ? name : "?");
        return store__db_error(err);
    }
    /* Made where its sandbox runs: leased to that worker in this
     * transaction, as an exec is. */
    json_object *pl = store__placement_here(w.name, STORE_WHY_EXEC_HERE);
    op_insert_t oi = { .id = op_id, .tenant_id = tenant_id, .sandbox_id = sandbox_id, .kind = "snapshot",
                       .idempotency_key = idempotency_key, .request_hash = request_hash, .request_text = req_text,
                       .created_by = created_by, .deadline_seconds = lim->deadline_seconds,
                       .state = w.id[0] ? OP_LEASED : OP_PENDING, .worker_id = w.id, .worker_name = w.name,
                       .lease_seconds = lim->lease_seconds, .placement = pl };
    json_object *op = NULL;
    rc = store__op_insert(c, &oi, &op);
    json_object_put(pl);
    free(req_text);
    if (rc < 0) {
        bool dup = idempotency_key && db_last_unique_violation();
        db_rollback(c);
        if (dup) {
            int rr = store__idem_replay(c, tenant_id, idempotency_key, "snapshot", request_hash, false, ret, err);
            if (rr > 0)
                reply_add_snapshot(c, jsonx_get_str(jsonx_get_obj(*ret, "operation"), "id"), *ret);
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
        rc = store__op_reply(c, NULL, op_id, ret, err);
        if (rc == 0)
            reply_add_snapshot(c, op_id, *ret);
        return rc;
    }
    store__count_placed_now("snapshot");
    *ret = store__wrap("operation", op);
    reply_add_snapshot(c, op_id, *ret);
    return 0;
}

/* WHERE for one snapshot by id or name ($1) within scope ($2; NULL: any
 * tenant): a live one (a name may be reused once deleted; an id finds a
 * deleted one too). */
#define SNAPSHOT_REF_WHERE                                                                                       \
    "WHERE (sn.id = $1 OR (sn.name = $1 AND sn.deleted_at IS NULL)) AND ($2::text IS NULL OR sn.tenant_id = $2) "

int store_snapshot_get(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err)
{
    const char *p[] = { ref, scope };
    return store__api_get(c, &store__t_snapshot, SNAPSHOT_FROM SNAPSHOT_REF_WHERE "ORDER BY sn.created_at DESC LIMIT 1",
                          2, p, "snapshot", ref, ret, err);
}

int store_snapshot_list(PGconn *c, const char *scope, const char *sandbox_id, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope, sandbox_id };
    return store__api_list(c, &store__t_snapshot,
                           SNAPSHOT_FROM "WHERE sn.deleted_at IS NULL AND ($1::text IS NULL OR sn.tenant_id = $1) "
                                         "AND ($2::text IS NULL OR sn.sandbox_id = $2) "
                                         "ORDER BY sn.created_at DESC, sn.id LIMIT 1000",
                           2, p, "snapshots", ret, err);
}

int store_snapshot_delete(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err)
{
    const char *p[] = { ref, scope };
    if (db_begin(c) < 0)
        return store__db_error(err);
    char id[SBX_ID_MAX] = "", tenant_id[SBX_ID_MAX] = "", sbx[SBX_ID_MAX] = "", name[SBX_SNAPSHOT_NAME_MAX + 1] = "";
    PGresult *r = db_exec(c,
                          "SELECT sn.id, sn.tenant_id, sn.sandbox_id, coalesce(sn.name, ''), sn.deleted_at IS NOT NULL "
                          "FROM snapshots sn " SNAPSHOT_REF_WHERE "ORDER BY sn.created_at DESC LIMIT 1 FOR UPDATE",
                          2, p);
    if (!r) {
        db_rollback(c);
        return store__db_error(err);
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no snapshot %.64s", ref);
    }
    snprintf(id, sizeof id, "%s", db_get(r, 0, 0));
    snprintf(tenant_id, sizeof tenant_id, "%s", db_get(r, 0, 1));
    snprintf(sbx, sizeof sbx, "%s", db_get(r, 0, 2));
    snprintf(name, sizeof name, "%s", db_get(r, 0, 3));
    bool gone = db_get_bool(r, 0, 4);
    PQclear(r);
    if (!gone) {
        json_object *ed = json_object_new_object();
        jsonx_add_str(ed, "snapshot", id);
        if (*name)
            jsonx_add_str(ed, "name", name);
        if (db_run(c, "UPDATE snapshots SET deleted_at = now() WHERE id = $1", 1, (const char *const[]){ id }) < 0 ||
            store__event_add(c, tenant_id, "snapshot.deleted", sbx, NULL, ed) < 0) {
            db_rollback(c);
            return store__db_error(err);
        }
    }
    if (db_commit(c) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    const char *g[] = { id, NULL };
    return store__api_get(c, &store__t_snapshot, SNAPSHOT_FROM SNAPSHOT_REF_WHERE, 2, g, "snapshot", ref, ret, err);
}

int store_snapshot_resolve(PGconn *c, const char *tenant_id, const char *ref, char ret_id[SBX_ID_MAX],
                           char *ret_image, size_t imagelen, isolation_t *ret_iso, api_error_t *err)
{
    const char *p[] = { ref, tenant_id };
    PGresult *r = db_exec(c,
                          "SELECT sn.id, sn.image, (" STORE_SNAPSHOT_STATE "), CASE WHEN EXISTS (SELECT 1 FROM "
                          "  snapshot_copies sc JOIN workers cw ON cw.id = sc.worker_id WHERE sc.snapshot_id = sn.id "
                          "  AND sc.ready_at IS NOT NULL AND cw.state <> 'lost') THEN 'ready' "
                          "  ELSE coalesce(w.state, 'lost') END, "
                          "  coalesce(w.name, ''), sn.isolation " SNAPSHOT_FROM SNAPSHOT_REF_WHERE
                          "ORDER BY sn.created_at DESC LIMIT 1",
                          2, p);
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no snapshot %.64s (sandbox snapshots list shows them)", ref);
    }
    int rc = 0;
    const char *state = db_get(r, 0, 2), *wstate = db_get(r, 0, 3);
    if (strcmp(state, "ready") != 0)
        rc = api_error_set(err, API_CONFLICT, "snapshot %.64s is %s; a sandbox starts only from a ready one%s", ref,
                           state,
                           strcmp(state, "pending") == 0 ? " (wait for its snapshot operation)" : "");
    else if (strcmp(wstate, "lost") == 0)
        rc = api_error_set(err, API_UNAVAILABLE,
                           "snapshot %.64s is on worker %s, which is lost: its bytes are there only", ref,
                           db_get(r, 0, 4));
    if (rc == 0) {
        snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        snprintf(ret_image, imagelen, "%s", db_get(r, 0, 1));
        if (ret_iso && isolation_parse(db_get(r, 0, 5), ret_iso) < 0)
            *ret_iso = ISO_CONTAINER;
    }
    PQclear(r);
    return rc;
}

int store__snapshot_made(PGconn *c, const char *op_id, json_object *result)
{
    int64_t size = -1, image = -1;
    bool memory = false;
    jsonx_get_int(result, "size_bytes", &size);
    jsonx_get_int(result, "image_bytes", &image);
    jsonx_get_bool(result, "memory", &memory);
    char sz[24], im[24];
    snprintf(sz, sizeof sz, "%lld", (long long)size);
    snprintf(im, sizeof im, "%lld", (long long)image);
    /* its ready event names it; a snapshot deleted meanwhile stays deleted
     * (the worker's next heartbeat removes the bytes). memory: what the
     * worker says it kept, never what was asked */
    const char *p[] = { op_id, size >= 0 ? sz : NULL, image >= 0 ? im : NULL, memory ? "true" : "false" };
    return db_run(c,
                  "WITH u AS (UPDATE snapshots SET ready_at = now(), size_bytes = $2::bigint, "
                  "  image_bytes = $3::bigint, memory = $4::boolean "
                  "  WHERE operation_id = $1 AND ready_at IS NULL AND deleted_at IS NULL "
                  "  RETURNING id, tenant_id, sandbox_id, name, size_bytes, memory) "
                  "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
                  "SELECT tenant_id, 'snapshot.ready', sandbox_id, $1, jsonb_strip_nulls(jsonb_build_object("
                  "  'snapshot', id, 'name', name, 'size_bytes', size_bytes, 'memory', memory)) FROM u",
                  4, p);
}

int store__held_unwanted(PGconn *c, const char *worker_id, json_object *held, const char *prefix, const char *sql,
                         json_object **ret, api_error_t *err)
{
    *ret = json_object_new_array();
    size_t n = held ? json_object_array_length(held) : 0;
    if (n == 0)
        return 0;
    json_object *ids = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        const char *id = jsonx_get_str(json_object_array_get_idx(held, i), "id");
        if (id && ids_valid(prefix, id))
            json_object_array_add(ids, json_object_new_string(id));
    }
    char *ids_text = jsonx_dump(ids);
    json_object_put(ids);
    const char *p[] = { worker_id, ids_text };
    PGresult *r = db_exec(c, sql, 2, p);
    free(ids_text);
    if (!r)
        return store__db_error(err);
    for (int i = 0; i < PQntuples(r); i++)
        json_object_array_add(*ret, json_object_new_string(db_get(r, i, 0)));
    PQclear(r);
    return 0;
}

int store_snapshot_unwanted(PGconn *c, const char *worker_id, json_object *held, json_object **ret,
                            api_error_t *err)
{
    return store__held_unwanted(
        c, worker_id, held, "snp",
        "SELECT x FROM jsonb_array_elements_text($2::jsonb) x WHERE NOT EXISTS (SELECT 1 "
        "FROM snapshots sn WHERE sn.id = x AND sn.deleted_at IS NULL AND (sn.worker_id = $1 OR "
        "  EXISTS (SELECT 1 FROM snapshot_copies sc LEFT JOIN operations o ON o.id = sc.operation_id "
        "    WHERE sc.snapshot_id = sn.id AND sc.worker_id = $1 AND (sc.ready_at IS NOT NULL "
        "      OR o.state IN ('pending', 'admitted', 'leased', 'running'))))) "
        "LIMIT 256",
        ret, err);
}

/* ---- templates ---------------------------------------------------------- */

int store_template_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope };
    /* Every live version, each template's newest ready one first (then
     * its newest), read with the table's own columns; the first row of
     * each template is the one shown. */
    PGresult *v = store__exec_cols(c, &store__t_snapshot, "SELECT ",
                                   ", (SELECT count(*) FROM snapshots z WHERE z.tenant_id = sn.tenant_id "
                                   "  AND z.template = sn.template AND z.deleted_at IS NULL) " SNAPSHOT_FROM
                                   "WHERE sn.template IS NOT NULL AND sn.deleted_at IS NULL "
                                   "AND ($1::text IS NULL OR sn.tenant_id = $1) "
                                   "ORDER BY tn.name, sn.template, (sn.ready_at IS NOT NULL) DESC, sn.version DESC "
                                   "LIMIT 10000",
                                   1, p);
    if (!v)
        return store__db_error(err);
    json_object *arr = json_object_new_array();
    int nc = PQnfields(v) - 1;
    const char *prev_t = NULL, *prev_tn = NULL;
    for (int i = 0; i < PQntuples(v); i++) {
        const char *tmpl = store__col_text(&store__t_snapshot, v, i, "template");
        const char *tn = store__col_text(&store__t_snapshot, v, i, "tenant");
        if (prev_t && strcmp(prev_t, tmpl) == 0 && strcmp(prev_tn, tn) == 0)
            continue; /* the first row of each template is its latest */
        prev_t = tmpl;
        prev_tn = tn;
        json_object *sn = store__row_json(&store__t_snapshot, v, i);
        const char *state = jsonx_get_str(sn, "state");
        json_object *t = json_object_new_object();
        jsonx_add_str(t, "name", tmpl);
        jsonx_add_str(t, "tenant", tn);
        jsonx_add_int(t, "versions", db_get_ll(v, i, nc));
        if (state && strcmp(state, "ready") == 0)
            jsonx_add(t, "latest", sn);
        else {
            json_object_put(sn);
            jsonx_add(t, "latest", NULL);
        }
        json_object_array_add(arr, t);
    }
    PQclear(v);
    *ret = store__wrap("templates", arr);
    return 0;
}

int store_template_get(PGconn *c, const char *tenant_id, const char *name, json_object **ret, api_error_t *err)
{
    const char *p[] = { tenant_id, name };
    json_object *versions = NULL;
    if (store__fetch_all(c, &store__t_snapshot,
                         SNAPSHOT_FROM "WHERE sn.tenant_id = $1 AND sn.template = $2 AND sn.deleted_at IS NULL "
                                       "ORDER BY sn.version DESC LIMIT 1000",
                         2, p, &versions) < 0)
        return store__db_error(err);
    if (json_object_array_length(versions) == 0) {
        json_object_put(versions);
        return api_error_set(err, API_NOT_FOUND, "no template %.64s", name);
    }
    json_object *t = json_object_new_object();
    jsonx_add_str(t, "name", name);
    jsonx_add_str(t, "tenant", jsonx_get_str(json_object_array_get_idx(versions, 0), "tenant"));
    jsonx_add(t, "versions", versions);
    *ret = store__wrap("template", t);
    return 0;
}

int store_template_delete(PGconn *c, const char *tenant_id, const char *name, int64_t version, json_object **ret,
                          api_error_t *err)
{
    char v[24];
    snprintf(v, sizeof v, "%lld", (long long)version);
    const char *p[] = { tenant_id, name, version > 0 ? v : NULL };
    PGresult *r = db_exec(c,
                          "WITH d AS (UPDATE snapshots SET deleted_at = now() WHERE tenant_id = $1 AND template = $2 "
                          "  AND ($3::int IS NULL OR version = $3::int) AND deleted_at IS NULL "
                          "  RETURNING id, tenant_id, sandbox_id, template, version), "
                          "e AS (INSERT INTO events (tenant_id, kind, sandbox_id, data) SELECT tenant_id, "
                          "  'snapshot.deleted', sandbox_id, jsonb_build_object('snapshot', id, 'template', template, "
                          "  'version', version) FROM d) "
                          "SELECT count(*) FROM d",
                          3, p);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return store__db_error(err);
    }
    long long n = db_get_ll(r, 0, 0);
    PQclear(r);
    if (n == 0)
        return version > 0 ? api_error_set(err, API_NOT_FOUND, "template %.64s has no version %lld", name,
                                           (long long)version)
                           : api_error_set(err, API_NOT_FOUND, "no template %.64s", name);
    json_object *t = json_object_new_object();
    jsonx_add_str(t, "name", name);
    jsonx_add_int(t, "deleted_versions", n);
    *ret = store__wrap("template", t);
    return 0;
}

int store_template_resolve(PGconn *c, const char *tenant_id, const char *ref, char ret_id[SBX_ID_MAX],
                           char *ret_image, size_t imagelen, isolation_t *ret_iso, api_error_t *err)
{
    char name[SBX_SNAPSHOT_NAME_MAX + 1], ver[24] = "";
    const char *colon = strchr(ref, ':');
    size_t n = colon ? (size_t)(colon - ref) : strlen(ref);
    if (n == 0 || n > SBX_SNAPSHOT_NAME_MAX)
        return api_error_set(err, API_NOT_FOUND, "no template %.64s", ref);
    snprintf(name, sizeof name, "%.*s", (int)n, ref);
    if (colon) {
        const char *d = colon + 1;
        if (!*d || strlen(d) > 9 || strspn(d, "0123456789") != strlen(d))
            return api_error_set(err, API_INVALID_ARGUMENT, "template must be NAME or NAME:VERSION (got %.80s)", ref);
        snprintf(ver, sizeof ver, "%s", d);
    }
    const char *p[] = { tenant_id, name, *ver ? ver : NULL };
    PGresult *r = db_exec(c,
                          "SELECT sn.id, sn.image, (" STORE_SNAPSHOT_STATE "), coalesce(w.state, 'lost'), sn.version, sn.isolation "
                          SNAPSHOT_FROM "WHERE sn.tenant_id = $1 AND sn.template = $2 AND sn.deleted_at IS NULL "
                          "AND ($3::int IS NULL OR sn.version = $3::int) "
                          /* the newest ready one, else the newest (to say why) */
                          "ORDER BY (sn.ready_at IS NOT NULL) DESC, sn.version DESC LIMIT 1",
                          3, p);
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return *ver ? api_error_set(err, API_NOT_FOUND, "template %s has no version %s", name, ver)
                    : api_error_set(err, API_NOT_FOUND, "no template %s (sandbox templates list shows them)", name);
    }
    int rc = 0;
    const char *state = db_get(r, 0, 2);
    if (strcmp(state, "ready") != 0)
        rc = api_error_set(err, API_CONFLICT, "template %s version %s is %s; a sandbox starts only from a ready one",
                           name, db_get(r, 0, 4), state);
    else if (strcmp(db_get(r, 0, 3), "lost") == 0)
        rc = api_error_set(err, API_UNAVAILABLE, "template %s version %s is on a lost worker", name, db_get(r, 0, 4));
    if (rc == 0) {
        snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        snprintf(ret_image, imagelen, "%s", db_get(r, 0, 1));
        if (ret_iso && isolation_parse(db_get(r, 0, 5), ret_iso) < 0)
            *ret_iso = ISO_CONTAINER;
    }
    PQclear(r);
    return rc;
}

/* ---- copies on other workers ------------------------------------------- */

int store__snapshot_copy_insert(PGconn *c, const store_limits_t *lim, const char *snapshot_id, const char *isolation,
                                const char *tenant_id, const char *sandbox_id, const char *worker_id,
                                const char *worker_name,
                                const char *source_worker_id, const char *created_by, const char *why,
                                json_object **ret_op)
{
    char op_id[SBX_ID_MAX];
    ids_new("op", op_id);
    json_object *req = json_object_new_object();
    jsonx_add_str(req, "snapshot_id", snapshot_id);
    jsonx_add_str(req, "worker", worker_name);
    jsonx_add_str(req, "isolation", isolation);
    char *req_text = jsonx_dump(req);
    json_object_put(req);
    json_object *pl = store__placement_here(worker_name, why);
    op_insert_t oi = { .id = op_id, .tenant_id = tenant_id, .sandbox_id = sandbox_id, .kind = "snapshot_copy",
                       .request_hash = "", .request_text = req_text, .created_by = created_by,
                       .deadline_seconds = lim->deadline_seconds, .state = OP_LEASED, .worker_id = worker_id,
                       .worker_name = worker_name, .lease_seconds = lim->lease_seconds, .placement = pl };
    int rc = store__op_insert(c, &oi, ret_op);
    json_object_put(pl);
    free(req_text);
    const char *ins[] = { snapshot_id, worker_id, source_worker_id && *source_worker_id ? source_worker_id : NULL,
                          op_id };
    if (rc < 0 ||
        db_run(c, "INSERT INTO snapshot_copies (snapshot_id, worker_id, source_worker_id, operation_id) "
                  "VALUES ($1, $2, $3, $4)", 4, ins) < 0)
        return SBX_EDB;
    return 0;
}

int store_snapshot_copy_create(PGconn *c, const store_limits_t *lim, const char *scope, const char *ref,
                               const char *worker_name, const char *created_by, json_object **ret, api_error_t *err)
{
    const char *p[] = { ref, scope };
    if (db_begin(c) < 0)
        return store__db_error(err);
    PGresult *r = db_exec(c,
                          "SELECT sn.id, sn.tenant_id, sn.sandbox_id, (" STORE_SNAPSHOT_STATE "), "
                          "  coalesce(sn.worker_id, ''), coalesce(w.name, ''), sn.isolation " SNAPSHOT_FROM
                          SNAPSHOT_REF_WHERE "ORDER BY sn.created_at DESC LIMIT 1 FOR UPDATE OF sn",
                          2, p);
    if (!r || PQntuples(r) != 1) {
        bool none = r != NULL;
        PQclear(r);
        db_rollback(c);
        return none ? api_error_set(err, API_NOT_FOUND, "no snapshot %.64s", ref) : store__db_error(err);
    }
    char id[SBX_ID_MAX], tenant_id[SBX_ID_MAX], sbx[SBX_ID_MAX], holder[SBX_ID_MAX], holder_name[160];
    snprintf(id, sizeof id, "%s", db_get(r, 0, 0));
    snprintf(tenant_id, sizeof tenant_id, "%s", db_get(r, 0, 1));
    snprintf(sbx, sizeof sbx, "%s", db_get(r, 0, 2));
    snprintf(holder, sizeof holder, "%s", db_get(r, 0, 4));
    snprintf(holder_name, sizeof holder_name, "%s", db_get(r, 0, 5));
    bool ready = strcmp(db_get(r, 0, 3), "ready") == 0;
    char state[16];
    snprintf(state, sizeof state, "%s", db_get(r, 0, 3));
    char iso[16];
    snprintf(iso, sizeof iso, "%s", db_get(r, 0, 6));
    bool vm = strcmp(iso, "microvm") == 0;
    PQclear(r);
    int rc = 0;
    if (!ready)
        rc = api_error_set(err, API_CONFLICT, "snapshot %.64s is %s: only a ready one is copied", ref, state);
    char wid[SBX_ID_MAX] = "", wname[160] = "";
    if (rc == 0) {
        /* a microvm snapshot's sandboxes run as microvm; others', as container or gvisor */
        r = db_exec(c,
                    "SELECT w.id, w.name, w.state, w.stopping_at IS NULL, "
                    "  CASE WHEN $2 THEN 'microvm' = ANY(w.isolation) "
                    "    ELSE 'container' = ANY(w.isolation) OR 'gvisor' = ANY(w.isolation) END "
                    "FROM workers w WHERE w.name = $1",
                    2, (const char *const[]){ worker_name, vm ? "true" : "false" });
        if (!r) {
            db_rollback(c);
            return store__db_error(err);
        }
        if (PQntuples(r) != 1)
            rc = api_error_set(err, API_NOT_FOUND, "no worker %.64s (sandbox workers lists them)", worker_name);
        else if (strcmp(db_get(r, 0, 2), "ready") != 0 || !db_get_bool(r, 0, 3))
            rc = api_error_set(err, API_CONFLICT, "worker %s is %s: a copy goes to a ready worker", db_get(r, 0, 1),
                               db_get_bool(r, 0, 3) ? db_get(r, 0, 2) : "stopping");
        else if (!db_get_bool(r, 0, 4))
            rc = api_error_set(err, API_ISOLATION_UNAVAILABLE, "worker %s %s", db_get(r, 0, 1),
                               vm ? "does not offer microvm: a microvm snapshot's sandboxes run as that"
                                  : "offers neither container nor gvisor: a snapshot's sandboxes run as those");
        else if (strcmp(db_get(r, 0, 0), holder) == 0)
            rc = api_error_set(err, API_CONFLICT, "snapshot %s was made on worker %s: it is there already", id,
                               holder_name);
        if (rc == 0) {
            snprintf(wid, sizeof wid, "%s", db_get(r, 0, 0));
            snprintf(wname, sizeof wname, "%s", db_get(r, 0, 1));
        }
        PQclear(r);
    }
    if (rc == 0) {
        /* one copy per worker: a failed one gives its place to the next */
        const char *q[] = { id, wid };
        r = db_exec(c,
                    "SELECT sc.operation_id, sc.ready_at IS NOT NULL, coalesce(o.state, 'failed') "
                    "FROM snapshot_copies sc LEFT JOIN operations o ON o.id = sc.operation_id "
                    "WHERE sc.snapshot_id = $1 AND sc.worker_id = $2",
                    2, q);
        if (!r) {
            db_rollback(c);
            return store__db_error(err);
        }
        if (PQntuples(r) == 1) {
            bool failed = !db_get_bool(r, 0, 1) && (strcmp(db_get(r, 0, 2), "failed") == 0 ||
                                                     strcmp(db_get(r, 0, 2), "cancelled") == 0 ||
                                                     strcmp(db_get(r, 0, 2), "succeeded") == 0);
            if (!failed)
                rc = api_error_set(err, API_CONFLICT, "worker %s %s snapshot %s (operation %s)", wname,
                                   db_get_bool(r, 0, 1) ? "holds a copy of" : "is taking a copy of", id,
                                   db_get(r, 0, 0));
            else if (db_run(c, "DELETE FROM snapshot_copies WHERE snapshot_id = $1 AND worker_id = $2", 2, q) < 0) {
                PQclear(r);
                db_rollback(c);
                return store__db_error(err);
            }
        }
        PQclear(r);
    }
    if (rc < 0) {
        db_rollback(c);
        return rc;
    }
    json_object *op = NULL;
    if (store__snapshot_copy_insert(c, lim, id, iso, tenant_id, sbx, wid, wname, holder, created_by,
                                    "the worker the copy is for", &op) < 0 ||
        db_commit(c) < 0) {
        json_object_put(op);
        store__db_error(err);
        db_rollback(c);
        return SBX_EDB;
    }
    store__count_placed_now("snapshot_copy");
    *ret = store__wrap("operation", op);
    json_object *sn = NULL;
    const char *g[] = { id, NULL };
    if (store__fetch_one(c, &store__t_snapshot, SNAPSHOT_FROM SNAPSHOT_REF_WHERE, 2, g, &sn) == 0)
        jsonx_add(*ret, "snapshot", sn);
    return 0;
}

int store_snapshot_export_source(PGconn *c, const char *worker_id, const char *snapshot_id, logs_source_t *src,
                                 int64_t *ret_image_bytes, api_error_t *err)
{
    memset(src, 0, sizeof *src);
    const char *p[] = { worker_id, snapshot_id };
    PGresult *r = db_exec(c,
                          "SELECT coalesce(hw.id, ''), coalesce(hw.state, 'lost'), coalesce(hw.route_address, ''), "
                          "  CASE WHEN " STORE_TOKEN_LIVE("t") " THEN coalesce(t.hash, '') ELSE '' END, "
                          "  sn.tenant_id, coalesce(sn.image_bytes, 0), coalesce(hw.name, ''), "
                          /* a microvm snapshot's saved RAM: at most its sandbox's memory */
                          "  CASE WHEN sn.memory THEN coalesce((SELECT (s.spec->>'memory_mib')::bigint "
                          "    FROM sandboxes s WHERE s.id = sn.sandbox_id), 65536) * 1048576 ELSE 0 END "
                          "FROM operations o JOIN snapshot_copies sc ON sc.operation_id = o.id "
                          "JOIN snapshots sn ON sn.id = sc.snapshot_id "
                          "LEFT JOIN workers hw ON hw.id = sn.worker_id LEFT JOIN api_tokens t ON t.id = hw.token_id "
                          "WHERE o.kind = 'snapshot_copy' AND o.state IN ('leased', 'running') AND o.lease_worker_id = $1 "
                          "  AND sc.worker_id = $1 AND sn.id = $2 AND sn.deleted_at IS NULL AND sn.ready_at IS NOT NULL "
                          "LIMIT 1",
                          2, p);
    if (!r)
        return store__db_error(err);
    int rc = 0;
    if (PQntuples(r) != 1)
        rc = api_error_set(err, API_FORBIDDEN,
                           "no copy of snapshot %.64s is leased to this worker: a worker reads a snapshot only for "
                           "its own copy operation",
                           snapshot_id);
    else if (strcmp(db_get(r, 0, 1), "ready") != 0 && strcmp(db_get(r, 0, 1), "draining") != 0)
        rc = api_error_set(err, API_UNAVAILABLE, "the worker holding snapshot %s (%s) is %s", snapshot_id,
                           db_get(r, 0, 6), db_get(r, 0, 1));
    else if (!db_get(r, 0, 2)[0] || !db_get(r, 0, 3)[0])
        rc = api_error_set(err, API_UNAVAILABLE, "the worker holding snapshot %s (%s) has no forwarder address",
                           snapshot_id, db_get(r, 0, 6));
    if (rc == 0) {
        snprintf(src->phase, sizeof src->phase, "running");
        snprintf(src->worker_id, sizeof src->worker_id, "%s", db_get(r, 0, 0));
        snprintf(src->worker_state, sizeof src->worker_state, "%s", db_get(r, 0, 1));
        snprintf(src->worker_address, sizeof src->worker_address, "%s", db_get(r, 0, 2));
        snprintf(src->worker_token_hash, sizeof src->worker_token_hash, "%s", db_get(r, 0, 3));
        snprintf(src->tenant_id, sizeof src->tenant_id, "%s", db_get(r, 0, 4));
        policy_init(&src->caps);
        *ret_image_bytes = db_get_ll(r, 0, 5) + db_get_ll(r, 0, 7);
    }
    PQclear(r);
    return rc;
}

int store__snapshot_copied(PGconn *c, const char *op_id, json_object *result)
{
    int64_t image = -1;
    jsonx_get_int(result, "image_bytes", &image);
    char im[24];
    snprintf(im, sizeof im, "%lld", (long long)image);
    const char *p[] = { op_id, image >= 0 ? im : NULL };
    return db_run(c,
                  "WITH u AS (UPDATE snapshot_copies SET ready_at = now(), image_bytes = $2::bigint "
                  "  WHERE operation_id = $1 AND ready_at IS NULL RETURNING snapshot_id, worker_id) "
                  "INSERT INTO events (tenant_id, kind, sandbox_id, operation_id, data) "
                  "SELECT sn.tenant_id, 'snapshot.copied', sn.sandbox_id, $1, jsonb_build_object('snapshot', sn.id, "
                  "  'worker', w.name) FROM u JOIN snapshots sn ON sn.id = u.snapshot_id "
                  "  JOIN workers w ON w.id = u.worker_id",
                  2, p);
}
