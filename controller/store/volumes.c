/* Volumes: a tenant's file systems that outlive its sandboxes
 * (docs/volumes.md). A row per volume says whose it is, its size and, once
 * a sandbox mounted it, the worker it lives on; which sandboxes mount it is
 * read from their specs. A create that names volumes locks their rows in
 * its transaction: read-write is exclusive, read-only shared. Deleting one
 * marks the row (refused while a live sandbox mounts it), and the worker's
 * next heartbeat is told to remove the bytes. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* WHERE for one volume by id or name ($1) within scope ($2; NULL: any
 * tenant): a live one (a name may be reused once deleted; an id finds a
 * deleted one too). */
#define VOLUME_REF_WHERE                                                                                         \
    "WHERE (vo.id = $1 OR (vo.name = $1 AND vo.deleted_at IS NULL)) AND ($2::text IS NULL OR vo.tenant_id = $2) "

/* The tenant's volume quota, in the caller's transaction (serialized per
 * tenant by an advisory lock held to its end): 0, SBX_EINVAL with err, or
 * SBX_EDB. */
static int volume_quota(PGconn *c, const store_limits_t *lim, const char *tenant_id, const policy_t *pol,
                        int64_t size_mib, api_error_t *err)
{
    if (lim->max_volumes <= 0)
        return api_error_set(err, API_POLICY_DENIED, "volumes are off on this server (max_volumes = 0)");
    int64_t max_n = policy_tighter(lim->max_volumes, pol->max_volumes);
    int64_t max_mib = policy_tighter(lim->max_volume_mib, pol->max_volume_mib);
    PGresult *r = db_exec(c,
                          "SELECT pg_advisory_xact_lock(hashtext('sandbox.volumes:' || $1)), count(*), "
                          "  coalesce(sum(size_mib), 0) FROM volumes WHERE tenant_id = $1 AND deleted_at IS NULL",
                          1, (const char *const[]){ tenant_id });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    long long n = db_get_ll(r, 0, 1), mib = db_get_ll(r, 0, 2);
    PQclear(r);
    if (n >= max_n)
        return api_error_set(err, API_QUOTA_EXCEEDED,
                             "tenant quota max_volumes = %lld: %lld volume%s kept; delete one first (sandbox volumes "
                             "delete NAME)",
                             (long long)max_n, n, n == 1 ? "" : "s");
    if (max_mib > 0 && mib + size_mib > max_mib)
        return api_error_set(err, API_QUOTA_EXCEEDED,
                             "tenant quota max_volume_mib = %lld: its volumes hold %lld MiB, and %lld more would pass it",
                             (long long)max_mib, mib, (long long)size_mib);
    return 0;
}

int store_volume_create(PGconn *c, const store_limits_t *lim, const char *tenant_id, const policy_t *pol,
                        const char *name, int64_t size_mib, const char *idempotency_key, const char *created_by,
                        json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX], sz[24];
    if (db_begin(c) < 0)
        return store__db_error(err);
    if (idempotency_key) {
        /* the key's volume, when this tenant used it already: the same
         * request answers with it, another is a conflict */
        const char *k[] = { tenant_id, idempotency_key };
        PGresult *r = db_exec(c, "SELECT id, name, size_mib FROM volumes WHERE tenant_id = $1 AND idempotency_key = $2",
                              2, k);
        if (!r) {
            db_rollback(c);
            return store__db_error(err);
        }
        if (PQntuples(r) == 1) {
            bool same = strcmp(db_get(r, 0, 1), name) == 0 && db_get_ll(r, 0, 2) == size_mib;
            snprintf(id, sizeof id, "%s", db_get(r, 0, 0));
            PQclear(r);
            db_rollback(c);
            if (!same)
                return api_error_set(err, API_CONFLICT,
                                     "this Idempotency-Key made volume %s with another name or size", id);
            const char *g[] = { id, NULL };
            return store__api_get(c, &store__t_volume, VOLUME_FROM VOLUME_REF_WHERE, 2, g, "volume", id, ret, err);
        }
        PQclear(r);
    }
    int rc = volume_quota(c, lim, tenant_id, pol, size_mib, err);
    if (rc < 0) {
        db_rollback(c);
        return rc == SBX_EDB ? store__db_error(err) : rc;
    }
    ids_new("vol", id);
    snprintf(sz, sizeof sz, "%lld", (long long)size_mib);
    const char *p[] = { id, tenant_id, name, sz, created_by, idempotency_key };
    if (db_run(c, "INSERT INTO volumes (id, tenant_id, name, size_mib, created_by, idempotency_key) "
                  "VALUES ($1, $2, $3, $4, $5, $6)", 6, p) < 0) {
        bool dup = db_last_unique_violation();
        db_rollback(c);
        if (dup)
            return api_error_set(err, API_CONFLICT,
                                 "tenant already has a volume named %s: pick another name, or delete it first "
                                 "(sandbox volumes delete %s)",
                                 name, name);
        return store__db_error(err);
    }
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "volume", id);
    jsonx_add_str(ed, "name", name);
    jsonx_add_int(ed, "size_mib", size_mib);
    if (store__event_add(c, tenant_id, "volume.created", NULL, NULL, ed) < 0 || db_commit(c) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    const char *g[] = { id, NULL };
    return store__api_get(c, &store__t_volume, VOLUME_FROM VOLUME_REF_WHERE, 2, g, "volume", id, ret, err);
}

int store_volume_get(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err)
{
    const char *p[] = { ref, scope };
    return store__api_get(c, &store__t_volume, VOLUME_FROM VOLUME_REF_WHERE "ORDER BY vo.created_at DESC LIMIT 1", 2,
                          p, "volume", ref, ret, err);
}

int store_volume_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope };
    return store__api_list(c, &store__t_volume,
                           VOLUME_FROM "WHERE vo.deleted_at IS NULL AND ($1::text IS NULL OR vo.tenant_id = $1) "
                                       "ORDER BY vo.created_at DESC, vo.id LIMIT 1000",
                           1, p, "volumes", ret, err);
}

int store_volume_delete(PGconn *c, const char *scope, const char *ref, json_object **ret, api_error_t *err)
{
    const char *p[] = { ref, scope };
    if (db_begin(c) < 0)
        return store__db_error(err);
    PGresult *r = db_exec(c,
                          "SELECT vo.id, vo.tenant_id, vo.name, vo.deleted_at IS NOT NULL, "
                          "  (SELECT string_agg(s.id, ', ' ORDER BY s.id) FROM " STORE_VOLUME_MOUNTS(
                              "vo") ") FROM volumes vo " VOLUME_REF_WHERE
                          "ORDER BY vo.created_at DESC LIMIT 1 FOR UPDATE OF vo",
                          2, p);
    if (!r) {
        db_rollback(c);
        return store__db_error(err);
    }
    if (PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no volume %.64s", ref);
    }
    char id[SBX_ID_MAX], tenant_id[SBX_ID_MAX], name[SBX_SANDBOX_NAME_MAX + 1], users[512];
    snprintf(id, sizeof id, "%s", db_get(r, 0, 0));
    snprintf(tenant_id, sizeof tenant_id, "%s", db_get(r, 0, 1));
    snprintf(name, sizeof name, "%s", db_get(r, 0, 2));
    bool gone = db_get_bool(r, 0, 3);
    snprintf(users, sizeof users, "%s", db_get(r, 0, 4) ? db_get(r, 0, 4) : "");
    PQclear(r);
    if (!gone && users[0]) {
        db_rollback(c);
        return api_error_set(err, API_CONFLICT,
                             "volume %s is mounted by %s: delete %s first (a volume is deleted only when no sandbox "
                             "mounts it)",
                             name, users, strchr(users, ',') ? "those sandboxes" : "that sandbox");
    }
    if (!gone) {
        json_object *ed = json_object_new_object();
        jsonx_add_str(ed, "volume", id);
        jsonx_add_str(ed, "name", name);
        if (db_run(c, "UPDATE volumes SET deleted_at = now() WHERE id = $1", 1, (const char *const[]){ id }) < 0 ||
            store__event_add(c, tenant_id, "volume.deleted", NULL, NULL, ed) < 0) {
            db_rollback(c);
            return store__db_error(err);
        }
    }
    if (db_commit(c) < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    const char *g[] = { id, NULL };
    return store__api_get(c, &store__t_volume, VOLUME_FROM VOLUME_REF_WHERE, 2, g, "volume", ref, ret, err);
}

int store_volume_resolve(PGconn *c, const char *tenant_id, spec_volume_t *v, char ret_worker[SBX_ID_MAX],
                         api_error_t *err)
{
    const char *p[] = { v->volume, tenant_id };
    PGresult *r = db_exec(c,
                          "SELECT vo.id, vo.size_mib, coalesce(vo.worker_id, ''), coalesce(w.state, ''), "
                          "  coalesce(w.name, '') FROM volumes vo LEFT JOIN workers w ON w.id = vo.worker_id "
                          "WHERE (vo.id = $1 OR vo.name = $1) AND vo.tenant_id = $2 AND vo.deleted_at IS NULL",
                          2, p);
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_NOT_FOUND, "no volume %.64s (sandbox volumes list shows them)", v->volume);
    }
    int rc = 0;
    if (strcmp(db_get(r, 0, 3), "lost") == 0)
        rc = api_error_set(err, API_UNAVAILABLE, "volume %.64s is on worker %s, which is lost: its bytes are there only",
                           v->volume, db_get(r, 0, 4));
    char *id = rc == 0 ? strdup(db_get(r, 0, 0)) : NULL;
    if (rc == 0 && !id)
        rc = api_error_set(err, API_INTERNAL, "out of memory");
    if (rc == 0) {
        free(v->volume);
        v->volume = id;
        v->size_mib = db_get_ll(r, 0, 1);
        snprintf(ret_worker, SBX_ID_MAX, "%s", db_get(r, 0, 2));
    }
    PQclear(r);
    return rc;
}

int store__volumes_claim(PGconn *c, const char *tenant_id, const sandbox_spec_t *spec, api_error_t *err)
{
    for (size_t i = 0; i < spec->nvolumes; i++) {
        const spec_volume_t *v = &spec->volumes[i];
        const char *p[] = { v->volume, tenant_id };
        /* the row lock serializes the creates that name it; the mounts are
         * read after it */
        PGresult *r = db_exec(c,
                              "SELECT vo.name, vo.deleted_at IS NOT NULL, "
                              "  (SELECT string_agg(s.id || CASE WHEN m->>'read_only' = 'true' THEN ' (read-only)' "
                              "     ELSE ' (read-write)' END, ', ' ORDER BY s.id) FROM " STORE_VOLUME_MOUNTS("vo") "), "
                              "  (SELECT count(*) FROM " STORE_VOLUME_MOUNTS("vo") " AND m->>'read_only' <> 'true') "
                              "FROM volumes vo WHERE vo.id = $1 AND vo.tenant_id = $2 FOR UPDATE OF vo",
                              2, p);
        if (!r)
            return SBX_EDB;
        int rc = 0;
        if (PQntuples(r) != 1 || db_get_bool(r, 0, 1))
            rc = api_error_set(err, API_NOT_FOUND, "no volume %s (deleted meanwhile)", v->volume);
        else if (db_get(r, 0, 2) && (!v->read_only || db_get_ll(r, 0, 3) > 0))
            rc = api_error_set(err, API_CONFLICT,
                               "volume %s is mounted by %s: %s (read-write is one sandbox's; read-only is shared by "
                               "sandboxes that all mount it read-only)",
                               db_get(r, 0, 0), db_get(r, 0, 2),
                               v->read_only ? "a read-only mount waits until no sandbox writes to it"
                                            : "a read-write mount waits until no other sandbox mounts it");
        PQclear(r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int store__volumes_pin(PGconn *c, const char *spec_text, const char *worker_id)
{
    const char *p[] = { spec_text, worker_id };
    /* Every volume of the spec not yet placed lives on this worker from
     * now on. */
    if (db_run(c,
               "UPDATE volumes SET worker_id = $2, placed_at = now() WHERE worker_id IS NULL AND id IN (SELECT "
               "  m->>'volume' FROM jsonb_array_elements(coalesce($1::jsonb->'volumes', '[]'::jsonb)) m)",
               2, p) < 0)
        return SBX_EDB;
    /* Read in a statement of its own, so that a create that placed one of
     * them elsewhere meanwhile (committed while this one waited for the
     * row) is seen: then this worker is the wrong one. */
    PGresult *r = db_exec(c,
                          "SELECT NOT EXISTS (SELECT 1 FROM volumes WHERE worker_id <> $2 AND id IN (SELECT "
                          "  m->>'volume' FROM jsonb_array_elements(coalesce($1::jsonb->'volumes', '[]'::jsonb)) m))",
                          2, p);
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        return SBX_EDB;
    }
    int ok = db_get_bool(r, 0, 0) ? 1 : 0;
    PQclear(r);
    return ok;
}

int store_volume_unwanted(PGconn *c, const char *worker_id, json_object *held, json_object **ret, api_error_t *err)
{
    return store__held_unwanted(c, worker_id, held, "vol",
                                "SELECT x FROM jsonb_array_elements_text($2::jsonb) x WHERE NOT EXISTS (SELECT 1 "
                                "FROM volumes vo WHERE vo.id = x AND vo.worker_id = $1 AND vo.deleted_at IS NULL) "
                                "LIMIT 256",
                                ret, err);
}
