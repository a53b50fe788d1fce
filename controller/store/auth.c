/* Tokens and tenants: authentication lookups and the admin API. */
#include "store_int.h"

/* ---- tokens and tenants ---- */

int store_token_find(PGconn *c, const char *token_id, char ret_hash[72], auth_info_t *ret, int64_t *ret_left_ms)
{
    const char *p[] = { token_id };
    PGresult *r = db_exec(c,
                          "SELECT t.hash, t.role, t.tenant_id, tn.name, "
                          "  (t.revoked_at IS NOT NULL OR (t.expires_at IS NOT NULL AND t.expires_at <= now())), "
                          "  coalesce(t.worker_name, ''), "
                          "  coalesce(floor(extract(epoch FROM t.expires_at - now()) * 1000)::bigint, -1) "
                          "FROM api_tokens t JOIN tenants tn ON tn.id = t.tenant_id WHERE t.id = $1",
                          1, p);
    if (!r)
        return SBX_EDB;
    int rc = 0;
    if (PQntuples(r) != 1) {
        rc = SBX_ENOTFOUND;
        goto cleanup;
    }
    if (db_get_bool(r, 0, 4)) {
        rc = SBX_EAUTH;
        goto cleanup;
    }
    memset(ret, 0, sizeof *ret);
    snprintf(ret_hash, 72, "%s", db_get(r, 0, 0));
    snprintf(ret->token_id, sizeof ret->token_id, "%s", token_id);
    snprintf(ret->tenant_id, sizeof ret->tenant_id, "%s", db_get(r, 0, 2));
    snprintf(ret->tenant, sizeof ret->tenant, "%s", db_get(r, 0, 3));
    snprintf(ret->worker_name, sizeof ret->worker_name, "%s", db_get(r, 0, 5));
    *ret_left_ms = db_get_ll(r, 0, 6);
    if (role_parse(db_get(r, 0, 1), &ret->role) < 0)
        rc = SBX_EAUTH;
cleanup:
    PQclear(r);
    return rc;
}

int store_tenant_resolve(PGconn *c, const char *name, bool create, char ret_id[SBX_ID_MAX])
{
    const char *p[] = { name };
    int rc = store__one_text(c, "SELECT id FROM tenants WHERE name = $1 AND deleted_at IS NULL", 1, p, ret_id,
                             SBX_ID_MAX);
    if (rc != SBX_ENOTFOUND || !create)
        return rc;
    char id[SBX_ID_MAX];
    ids_new("tnt", id);
    const char *q[] = { id, name };
    /* Concurrent creators: the loser's insert does nothing, then both read. */
    if (db_run(c, "INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", 2, q) < 0)
        return SBX_EDB;
    rc = store__one_text(c, "SELECT id FROM tenants WHERE name = $1 AND deleted_at IS NULL", 1, p, ret_id,
                         SBX_ID_MAX);
    return rc == SBX_ENOTFOUND ? SBX_EDB : rc;
}

/* Inserts a token for an existing tenant id; ttl_seconds 0 = no expiry;
 * worker_name (a worker token's binding) NULL = bound at first
 * registration. ret_id gets its id, ret_secret the token to show once. */
static int token_insert(PGconn *c, const char *tenant_id, role_t role, const char *name, const char *worker_name,
                        int64_t ttl_seconds, char ret_id[SBX_ID_MAX], char ret_secret[SBX_TOKEN_MAX])
{
    char id[SBX_ID_MAX], secret[SBX_TOKEN_MAX], hash[TOKEN_HASH_HEX], ttl[24];
    token_generate(id, secret);
    token_hash_hex(secret, hash);
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_seconds);
    const char *p[] = { id, tenant_id, role_name(role), name ? name : "", hash, ttl, worker_name };
    int rc = db_run(c, "INSERT INTO api_tokens (id, tenant_id, role, name, hash, expires_at, worker_name) "
                       "VALUES ($1, $2, $3, $4, $5, "
                       "CASE WHEN $6::bigint > 0 THEN now() + make_interval(secs => $6::bigint) END, $7)",
                    7, p);
    if (rc == 0) {
        memcpy(ret_id, id, SBX_ID_MAX);
        memcpy(ret_secret, secret, SBX_TOKEN_MAX);
    }
    sodium_memzero(secret, sizeof secret);
    return rc;
}

int store_token_create(PGconn *c, const char *tenant, role_t role, const char *name, const char *worker_name,
                       char ret_secret[SBX_TOKEN_MAX], char *err, size_t errlen)
{
    char tenant_id[SBX_ID_MAX], id[SBX_ID_MAX];
    if (store_tenant_resolve(c, tenant, true, tenant_id) < 0) {
        snprintf(err, errlen, "creating tenant %s: %s", tenant, db_last_error());
        return SBX_EDB;
    }
    if (token_insert(c, tenant_id, role, name, worker_name, 0, id, ret_secret) < 0) {
        snprintf(err, errlen, "storing the token: %s", db_last_error());
        return SBX_EDB;
    }
    return 0;
}

/* ---- tenants and tokens (admin API) ---- */

int store_tenant_create(PGconn *c, const char *name, json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX];
    ids_new("tnt", id);
    const char *p[] = { id, name };
    PGresult *r = store__exec_cols(c, &store__t_tenant, "INSERT INTO tenants AS tn (id, name) VALUES ($1, $2) "
                                   "ON CONFLICT (name) DO NOTHING RETURNING ", "", 2, p);
    if (!r)
        return store__db_error(err);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return api_error_set(err, API_CONFLICT, "tenant %s already exists", name);
    }
    *ret = store__wrap("tenant", store__row_json(&store__t_tenant, r, 0));
    PQclear(r);
    return 0;
}

int store_tenant_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope };
    return store__api_list(c, &store__t_tenant, " FROM tenants tn WHERE ($1::text IS NULL OR tn.id = $1) "
                           "AND tn.deleted_at IS NULL ORDER BY tn.name LIMIT 10000", 1, p, "tenants", ret, err);
}

int store_tenant_get(PGconn *c, const char *scope, const char *name, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope, name };
    int rc = store__api_get(c, &store__t_tenant, " FROM tenants tn WHERE ($1::text IS NULL OR tn.id = $1) "
                            "AND tn.name = $2 AND tn.deleted_at IS NULL", 2, p, "tenant", name, ret, err);
    if (rc < 0)
        return rc;
    /* What it uses now: the live counters (migration 0014) and what its
     * pools hold, as quotas count them (store__tenant_quota); its tokens. */
    PGresult *r = db_exec(c, "SELECT u.n, u.cpu, u.mem, p.n, p.size, p.cpu, p.mem, k.n FROM ("
                             "SELECT coalesce(sum(live), 0)::bigint AS n, coalesce(sum(live_cpu_millis), 0)::bigint AS cpu, "
                             "coalesce(sum(live_memory_mib), 0)::bigint AS mem FROM sandbox_usage_now "
                             "WHERE tenant_id = (SELECT id FROM tenants WHERE name = $1 AND deleted_at IS NULL) "
                             "AND worker_id = '') u, ("
                             "SELECT count(*) AS n, coalesce(sum(size), 0)::bigint AS size, "
                             "coalesce(sum(size * cpu_millis), 0)::bigint AS cpu, "
                             "coalesce(sum(size * memory_mib), 0)::bigint AS mem FROM pools "
                             "WHERE tenant_id = (SELECT id FROM tenants WHERE name = $1 AND deleted_at IS NULL)) p, ("
                             "SELECT count(*) AS n FROM api_tokens WHERE revoked_at IS NULL "
                             "AND (expires_at IS NULL OR expires_at > now()) "
                             "AND tenant_id = (SELECT id FROM tenants WHERE name = $1 AND deleted_at IS NULL)) k",
                          1, (const char *const[]){ name });
    if (!r) {
        json_object_put(*ret);
        *ret = NULL;
        return store__db_error(err);
    }
    if (PQntuples(r) == 1) {
        json_object *u = json_object_new_object();
        static const char *const keys[] = { "live_sandboxes", "live_cpu_millis", "live_memory_mib", "pools",
                                            "pool_members", "pool_cpu_millis", "pool_memory_mib", "active_tokens" };
        for (int i = 0; i < 8; i++)
            jsonx_add(u, keys[i], json_object_new_int64(strtoll(db_get(r, 0, i) ? db_get(r, 0, i) : "0", NULL, 10)));
        jsonx_add(jsonx_get_obj(*ret, "tenant"), "usage", u);
    }
    PQclear(r);
    return 0;
}

int store_tenant_delete(PGconn *c, const char *name, json_object **ret, api_error_t *err)
{
    char id[SBX_ID_MAX];
    if (db_begin(c) < 0)
        return store__db_error(err);
    /* the row locked FOR UPDATE: a create's quota check locks it FOR NO KEY
     * UPDATE (store__tenant_quota) and then sees it deleted */
    int rc = store__one_text(c, "SELECT id FROM tenants WHERE name = $1 AND deleted_at IS NULL FOR UPDATE", 1,
                             (const char *const[]){ name }, id, sizeof id);
    if (rc == SBX_ENOTFOUND) {
        db_rollback(c);
        return api_error_set(err, API_NOT_FOUND, "no tenant %s", name);
    }
    if (rc < 0) {
        db_rollback(c);
        return store__db_error(err);
    }
    PGresult *r = db_exec(c, "SELECT (SELECT count(*) FROM sandboxes WHERE tenant_id = $1 "
                             "AND phase NOT IN ('deleted', 'failed')), "
                             "(SELECT count(*) FROM pools WHERE tenant_id = $1)",
                          1, (const char *const[]){ id });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return store__db_error(err);
    }
    long long live = strtoll(db_get(r, 0, 0), NULL, 10), pools = strtoll(db_get(r, 0, 1), NULL, 10);
    PQclear(r);
    if (live > 0 || pools > 0) {
        db_rollback(c);
        if (live > 0)
            return api_error_set(err, API_CONFLICT, "tenant %s owns %lld sandbox%s not deleted yet: delete %s first "
                                 "(sandbox list --tenant %s; sandbox rm ID...)", name, live, live == 1 ? "" : "es",
                                 live == 1 ? "it" : "them", name);
        return api_error_set(err, API_CONFLICT, "tenant %s has %lld warm pool%s: delete %s first (sandbox pools "
                             "list; sandbox pools delete NAME)", name, pools, pools == 1 ? "" : "s",
                             pools == 1 ? "it" : "them");
    }
    /* Its tokens stop at once (the NOTIFY at commit makes every controller
     * forget their cached lookups, as a revoke does); the row keeps the
     * history's names, under a name no new tenant can take. */
    r = store__exec_cols(c, &store__t_tenant,
                         "WITH k AS (UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) "
                         "  WHERE tenant_id = $1 RETURNING pg_notify('sandbox_wake', 'token:' || id)), "
                         /* its snapshots go too (their workers remove the bytes) */
                         "sn AS (UPDATE snapshots SET deleted_at = now() WHERE tenant_id = $1 AND deleted_at IS NULL), "
                         /* and its secrets, sealed or not */
                         "se AS (DELETE FROM secrets WHERE tenant_id = $1) "
                         "UPDATE tenants tn SET deleted_at = now(), name = tn.name || '.deleted.' || tn.id "
                         "WHERE tn.id = $1 RETURNING ",
                         "", 1, (const char *const[]){ id });
    if (!r || PQntuples(r) != 1) {
        PQclear(r);
        db_rollback(c);
        return store__db_error(err);
    }
    json_object *t = store__row_json(&store__t_tenant, r, 0);
    PQclear(r);
    json_object *ed = json_object_new_object();
    jsonx_add_str(ed, "name", name);
    if (store__event_add(c, id, "tenant.deleted", NULL, NULL, ed) < 0 || db_commit(c) < 0) {
        json_object_put(t);
        db_rollback(c);
        return store__db_error(err);
    }
    jsonx_add_str(t, "name", name);
    jsonx_add(t, "deleted", json_object_new_boolean(1));
    *ret = store__wrap("tenant", t);
    return 0;
}

#define TOKEN_FROM " FROM api_tokens t JOIN tenants tn ON tn.id = t.tenant_id "

static int token_load(PGconn *c, const char *id, json_object **ret)
{
    return store__fetch_one(c, &store__t_token, TOKEN_FROM "WHERE t.id = $1", 1, (const char *const[]){ id }, ret);
}

void store__policy_parse(const char *text, policy_t *ret)
{
    policy_init(ret);
    json_object *o = text ? store__parse_json_text(text) : NULL;
    /* A stored policy was validated on its way in; an unreadable one
     * (edited by hand) denies nothing rather than everything. */
    if (o && policy_from_json(o, ret, NULL) < 0)
        policy_init(ret);
    if (o)
        json_object_put(o);
}

int store_tenant_policy_by_name(PGconn *c, const char *name, char ret_id[SBX_ID_MAX], policy_t *ret)
{
    const char *p[] = { name };
    policy_init(ret);
    PGresult *r = db_exec(c, "SELECT id, policy::text FROM tenants WHERE name = $1 AND deleted_at IS NULL", 1, p);
    if (!r)
        return SBX_EDB;
    int rc = SBX_ENOTFOUND;
    if (PQntuples(r) == 1) {
        snprintf(ret_id, SBX_ID_MAX, "%s", db_get(r, 0, 0));
        store__policy_parse(db_get(r, 0, 1), ret);
        rc = 0;
    }
    PQclear(r);
    return rc;
}

int store_tenant_set_policy(PGconn *c, const char *name, const policy_t *policy, json_object **ret, api_error_t *err)
{
    json_object *pj = policy_to_json(policy);
    char *text = jsonx_dump(pj);
    json_object_put(pj);
    const char *p[] = { name, text };
    PGresult *r = NULL;
    int rc = store__begin_returning(c, &store__t_tenant, "UPDATE tenants tn SET policy = $2::jsonb WHERE name = $1 "
                                    "AND deleted_at IS NULL RETURNING ", 2, p, &r);
    free(text);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_NOT_FOUND, "no tenant %.64s", name);
    if (rc < 0)
        return store__db_error(err);
    json_object *t = store__row_json(&store__t_tenant, r, 0);
    if (store__event_add(c, jsonx_get_str(t, "id"), "tenant.policy", NULL, NULL, json_object_get(jsonx_get_obj(t, "policy"))) < 0 ||
        db_commit(c) < 0) {
        json_object_put(t);
        PQclear(r);
        db_rollback(c);
        return store__db_error(err);
    }
    PQclear(r);
    *ret = json_object_new_object();
    jsonx_add(*ret, "tenant", t);
    return 0;
}

int store_token_issue(PGconn *c, const char *tenant, role_t role, const char *name, const char *worker_name,
                      int64_t ttl_seconds, json_object **ret, char ret_secret[SBX_TOKEN_MAX], api_error_t *err)
{
    char tenant_id[SBX_ID_MAX], id[SBX_ID_MAX];
    int rc = store_tenant_resolve(c, tenant, false, tenant_id);
    if (rc == SBX_ENOTFOUND)
        return api_error_set(err, API_NOT_FOUND, "no tenant %.64s (create it first: sandbox tenants create)", tenant);
    if (rc < 0 || token_insert(c, tenant_id, role, name, worker_name, ttl_seconds, id, ret_secret) < 0)
        return store__db_error(err);
    json_object *t = NULL;
    if (token_load(c, id, &t) < 0)
        return store__db_error(err);
    *ret = t;
    return 0;
}

int store_token_list(PGconn *c, const char *tenant, json_object **ret, api_error_t *err)
{
    const char *p[] = { tenant };
    return store__api_list(c, &store__t_token, TOKEN_FROM "WHERE ($1::text IS NULL OR tn.name = $1) "
                           "ORDER BY t.created_at LIMIT 10000", 1, p, "tokens", ret, err);
}

int store_token_revoke(PGconn *c, const char *id, json_object **ret, api_error_t *err)
{
    const char *p[] = { id };
    bool found = false;
    /* The NOTIFY (at commit) makes every controller forget the token's
     * cached lookup (controller/auth.c, controller/notify.c). */
    if (store__one_row(c, "WITH r AS (UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 "
                          "RETURNING id) SELECT id, pg_notify('sandbox_wake', 'token:' || id) FROM r",
                       1, p, &found) < 0)
        return store__db_error(err);
    if (!found)
        return api_error_set(err, API_NOT_FOUND, "no token %.64s", id);
    json_object *t = NULL;
    if (token_load(c, id, &t) < 0)
        return store__db_error(err);
    *ret = json_object_new_object();
    jsonx_add(*ret, "token", t);
    return 0;
}
