/* Warm pool endpoints: GET/POST /v1/pools, GET/DELETE /v1/pools/{name}.
 * An admin declares any pool (tenant absent: shared by every tenant); a
 * member declares pools of its own tenant within the policy's max_pool_size. */
#include "api.h"
#include "db.h"
#include "jsonx.h"
#include "limits.h"

#include <ctype.h>
#include <string.h>

/* 1 to SBX_POOL_NAME_MAX of [a-z0-9_-], starting with a letter or digit. */
static bool pool_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SBX_POOL_NAME_MAX || !isalnum((unsigned char)s[0]))
        return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' || *s == '_'))
            return false;
    return true;
}

/* The members' spec fields of a declaration (the rest: name, size). No
 * env, labels or selector: those belong to whoever claims. ttl_seconds is
 * an unclaimed member's (a claim sets the claimer's). */
static const char *const pool_spec_fields[] = { "tenant", "image", "cpu_millis", "memory_mib", "disk_mib", "network",
                                                "isolation", "read_only_root", "trust", "ttl_seconds", NULL };

/* The body's spec part as a new object; replies 400 on an unknown field. */
static json_object *pool_spec_object(req_t *rq, json_object *body)
{
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        return NULL;
    }
    json_object *so = json_object_new_object();
    json_object_object_foreach(body, key, val) {
        bool spec_field = false;
        for (const char *const *k = pool_spec_fields; *k; k++)
            spec_field = spec_field || strcmp(*k, key) == 0;
        if (spec_field) {
            json_object_object_add(so, key, json_object_get(val));
        } else if (strcmp(key, "name") != 0 && strcmp(key, "size") != 0) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "unknown field \"%.64s\" (a pool has no env, labels or "
                             "selector: the create that claims a member brings its own)", key);
            json_object_put(so);
            return NULL;
        }
    }
    return so;
}

/* Who may declare a pool of this tenant and this size: an admin any; a
 * member only its own tenant, within max_pool_size. Replies on a refusal. */
static int pool_allowed(req_t *rq, const char *tenant_name, const policy_t *policy, int64_t size)
{
    if (rq->auth.role == ROLE_ADMIN)
        return 0;
    if (!tenant_name || strcmp(tenant_name, rq->auth.tenant) != 0) {
        http_reply_error(rq, API_FORBIDDEN, "a member token declares pools of its own tenant %s only; a pool "
                         "shared by every tenant needs an admin token", rq->auth.tenant);
        return SBX_EINVAL;
    }
    if (policy->max_pool_size == 0) {
        http_reply_error(rq, API_FORBIDDEN, "tenant %s may not declare pools (tenant policy max_pool_size is not set)",
                         rq->auth.tenant);
        return SBX_EINVAL;
    }
    if (size > policy->max_pool_size) {
        http_reply_error(rq, API_POLICY_DENIED, "size %lld is over the tenant policy max_pool_size = %lld",
                         (long long)size, (long long)policy->max_pool_size);
        return SBX_EINVAL;
    }
    return 0;
}

void api_pool_create(req_t *rq)
{
    controller_t *ctl = rq->ctl;
    json_object *body = NULL, *so = NULL, *resp = NULL, *classification = NULL;
    sandbox_spec_t spec;
    policy_t policy;
    api_error_t err;
    memset(&spec, 0, sizeof spec);
    policy_init(&policy);
    if (http_read_json(rq, (size_t)ctl->max_body_client, &body) < 0 || !(so = pool_spec_object(rq, body)))
        goto cleanup;
    const char *name = jsonx_get_str(body, "name");
    json_object *sz;
    if (!name || !pool_name_valid(name)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "name must be 1 to %d lowercase letters, digits, - or _, "
                         "starting with a letter or digit", SBX_POOL_NAME_MAX);
        goto cleanup;
    }
    if (!json_object_object_get_ex(body, "size", &sz) || !json_object_is_type(sz, json_type_int) ||
        json_object_get_int64(sz) < 1 || json_object_get_int64(sz) > SBX_POOL_SIZE_MAX) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "size must be an integer from 1 to %d", SBX_POOL_SIZE_MAX);
        goto cleanup;
    }
    int64_t size = json_object_get_int64(sz);
    if (spec_from_json_default(so, cfg_str(&ctl->cfg, CFG_DEFAULT_IMAGE), &spec, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    /* A member token's pool is its tenant's even when the body names none. */
    if (!spec.tenant && rq->auth.role != ROLE_ADMIN)
        spec.tenant = strdup(rq->auth.tenant);
    char tenant_id[SBX_ID_MAX];
    if (spec.tenant) {
        int rc = store_tenant_policy_by_name(rq->db, spec.tenant, tenant_id, &policy);
        if (rc == SBX_ENOTFOUND) {
            http_reply_error(rq, API_NOT_FOUND, "no tenant %s", spec.tenant);
            goto cleanup;
        }
        if (rc < 0) {
            http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
            goto cleanup;
        }
    }
    if (pool_allowed(rq, spec.tenant, &policy, size) < 0)
        goto cleanup;
    /* No ttl_seconds: what a create of the tenant gets by default, within
     * the ceilings that bind it (a default above them would refuse the
     * pool of a tenant whose max_ttl_seconds is under it). */
    json_object *ttl;
    if (!json_object_object_get_ex(so, "ttl_seconds", &ttl) || json_object_is_type(ttl, json_type_null)) {
        int64_t cap = policy_tighter(ctl->max_ttl_seconds, policy.max_ttl_seconds);
        spec.ttl_seconds = SPEC_DEFAULT_TTL_SECONDS < cap ? SPEC_DEFAULT_TTL_SECONDS : cap;
    }
    /* The members are judged as the creates that will claim them are:
     * the ceilings, the tenant's rules (a shared pool: the server's). */
    classification_t cls;
    if (api_spec_admit(rq, &spec, &policy, &cls) < 0)
        goto cleanup;
    if (spec.nsecrets > 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "a warm pool's members carry no secrets (create the sandbox "
                         "with --secret instead)");
        goto cleanup;
    }
    if (spec.network == NET_OPEN && (policy.egress_allow_set || spec.egress.set)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "an open pool cannot serve tenant %s: its %s rules are "
                         "set on a sandbox when it is made", spec.tenant ? spec.tenant : "(shared)",
                         policy.egress_allow_set ? "egress_allow" : "egress");
        goto cleanup;
    }
    classification = classification_to_json(&cls);
    pool_decl_t d = { .name = name, .tenant_id = spec.tenant ? tenant_id : NULL, .spec = &spec,
                      .isolation = cls.isolation, .classification = classification, .size = size,
                      .created_by = rq->auth.token_id, .policy = spec.tenant ? &policy : NULL };
    if (store_pool_create(rq->db, &d, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    controller_kick_reconcile(ctl);
    http_reply_json(rq, 201, resp);
cleanup:
    spec_release(&spec);
    policy_release(&policy);
    if (classification)
        json_object_put(classification);
    if (so)
        json_object_put(so);
    if (body)
        json_object_put(body);
}

void api_pool_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_pool_list(rq->db, auth_scope(rq), &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_pool_get(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!pool_name_valid(name)) {
        http_reply_error(rq, API_NOT_FOUND, "no pool %.64s", name);
        return;
    }
    if (store_pool_get(rq->db, auth_scope(rq), name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_pool_delete(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!pool_name_valid(name)) {
        http_reply_error(rq, API_NOT_FOUND, "no pool %.64s", name);
        return;
    }
    if (store_pool_delete(rq->db, &rq->ctl->lim, auth_scope(rq), name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 200, resp);
}
