/* Admin endpoints: tenants and API tokens. */
#include "api.h"
#include "ids.h"
#include "imageref.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"

#include <ctype.h>
#include <sodium.h>
#include <string.h>

static bool tenant_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]))
        return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' || *s == '_'))
            return false;
    return true;
}

static bool require_admin(req_t *rq, const char *what)
{
    if (rq->auth.role == ROLE_ADMIN)
        return true;
    http_reply_error(rq, API_FORBIDDEN, "%s needs an admin token", what);
    return false;
}

/* Checks that body has only the named fields; replies 400 otherwise. */
static bool only_fields(req_t *rq, json_object *body, const char *const *known)
{
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        return false;
    }
    json_object_object_foreach(body, key, val) {
        (void)val;
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            ok = ok || strcmp(*k, key) == 0;
        if (!ok) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "unknown field \"%.64s\"", key);
            return false;
        }
    }
    return true;
}

void api_tenant_create(req_t *rq)
{
    static const char *const known[] = { "name", NULL };
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    if (!require_admin(rq, "creating tenants") || http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    const char *name = jsonx_get_str(body, "name");
    if (!only_fields(rq, body, known))
        goto cleanup;
    if (!name || !tenant_name_valid(name)) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "name must be 1 to 63 lowercase letters, digits, - or _, starting with a letter or digit");
        goto cleanup;
    }
    if (store_tenant_create(rq->db, name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    http_reply_json(rq, 201, resp);
cleanup:
    json_object_put(body);
}

void api_tenant_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_tenant_list(rq->db, auth_scope(rq), &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_tenant_get(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_tenant_get(rq->db, auth_scope(rq), name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_tenant_delete(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!require_admin(rq, "deleting tenants"))
        return;
    if (strcmp(name, rq->auth.tenant) == 0) {
        http_reply_error(rq, API_FORBIDDEN, "a token cannot delete its own tenant %s (its tokens, this one "
                         "included, would be revoked): use an admin token of another tenant", name);
        return;
    }
    if (store_tenant_delete(rq->db, name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    log_info("controller", "tenant %s deleted by %s (its tokens revoked)", name, rq->auth.token_id);
    http_reply_json(rq, 200, resp);
}

void api_tenant_set_policy(req_t *rq, const char *name)
{
    json_object *body = NULL, *resp = NULL;
    policy_t p;
    api_error_t err;
    controller_t *ctl = rq->ctl;
    policy_init(&p);
    if (!require_admin(rq, "changing a tenant's policy") ||
        http_read_json(rq, (size_t)ctl->max_body_client, &body) < 0)
        return;
    if (policy_from_json(body, &p, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    /* Tenants tighten the server's ceilings, never loosen them. */
    struct { const char *rule; int64_t tenant, server; } caps[] = {
        { "max_cpu_millis", p.max_cpu_millis, ctl->max_cpu_millis },
        { "max_memory_mib", p.max_memory_mib, ctl->max_memory_mib },
        { "max_disk_mib", p.max_disk_mib, ctl->max_disk_mib },
        { "max_ttl_seconds", p.max_ttl_seconds, ctl->max_ttl_seconds },
        { "exec_output_max_bytes", p.exec_output_max_bytes, ctl->exec_output_max },
        { "exec_output_default_bytes", p.exec_output_default_bytes, ctl->exec_output_max },
        { "exec_output_tenant_keep_bytes", p.exec_output_tenant_keep_bytes, ctl->lim.exec_output_tenant_keep },
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (caps[i].tenant > caps[i].server) {
            http_reply_error(rq, API_POLICY_DENIED,
                             "a tenant policy can only tighten the server: %s %lld is above the server ceiling %lld",
                             caps[i].rule, (long long)caps[i].tenant, (long long)caps[i].server);
            goto cleanup;
        }
    for (size_t i = 0; i < p.n_registries; i++) {
        char why[400];
        if (imageref_entry_within(cfg_str(&ctl->cfg, CFG_IMAGE_REGISTRIES), p.registries[i], why, sizeof why) < 0) {
            http_reply_error(rq, API_POLICY_DENIED, "%s", why);
            goto cleanup;
        }
    }
    if (classify_policy_check(&p, &ctl->rules, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    if (store_tenant_set_policy(rq->db, name, &p, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    log_info("controller", "tenant %s policy changed by %s", name, rq->auth.token_id);
    http_reply_json(rq, 200, resp);
cleanup:
    policy_release(&p);
    json_object_put(body);
}

void api_token_create(req_t *rq)
{
    static const char *const known[] = { "tenant", "role", "name", "ttl_seconds", "worker", NULL };
    json_object *body = NULL, *tok = NULL;
    api_error_t err;
    char secret[SBX_TOKEN_MAX];
    if (!require_admin(rq, "creating tokens") || http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!only_fields(rq, body, known))
        goto cleanup;
    const char *tenant = jsonx_get_str(body, "tenant");
    const char *role_s = jsonx_get_str(body, "role");
    const char *name = jsonx_get_str(body, "name");
    const char *worker = jsonx_get_str(body, "worker");
    int64_t ttl = 0;
    json_object *v;
    role_t role;
    if (!tenant || !tenant_name_valid(tenant)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "tenant is required (a tenant name)");
        goto cleanup;
    }
    if (!role_s || role_parse(role_s, &role) < 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "role must be admin, member or worker");
        goto cleanup;
    }
    if (json_object_object_get_ex(body, "name", &v) && !json_object_is_type(v, json_type_null) &&
        (!name || strlen(name) > SBX_MAX_NAME_BYTES)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "name must be a string of at most %d bytes", SBX_MAX_NAME_BYTES);
        goto cleanup;
    }
    if (json_object_object_get_ex(body, "ttl_seconds", &v) && !json_object_is_type(v, json_type_null) &&
        (!jsonx_get_int(body, "ttl_seconds", &ttl) || ttl < 1 || ttl > 10LL * 365 * 24 * 3600)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "ttl_seconds must be 1 to 315360000 (or absent: no expiry)");
        goto cleanup;
    }
    if (json_object_object_get_ex(body, "worker", &v) && !json_object_is_type(v, json_type_null) &&
        (!worker || !store_worker_name_valid(worker))) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "worker must be a worker name: 1 to %d letters, digits, . _ or -",
                         SBX_MAX_NAME_BYTES);
        goto cleanup;
    }
    if (worker && role != ROLE_WORKER) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "worker is only for role worker (a %s token acts for no worker)",
                         role_name(role));
        goto cleanup;
    }
    if (store_token_issue(rq->db, tenant, role, name, worker, ttl, &tok, secret, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    log_info("controller", "token %s (%s of tenant %s) created by %s", jsonx_get_str(tok, "id"), role_name(role),
             tenant, rq->auth.token_id);
    json_object *resp = json_object_new_object();
    jsonx_add(resp, "token", tok);
    jsonx_add_str(resp, "secret", secret);
    sodium_memzero(secret, sizeof secret);
    http_reply_json(rq, 201, resp);
cleanup:
    json_object_put(body);
}

void api_token_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!require_admin(rq, "listing tokens"))
        return;
    if (store_token_list(rq->db, http_query(rq, "tenant"), &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_token_revoke(req_t *rq, const char *id)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!require_admin(rq, "revoking tokens"))
        return;
    if (!ids_valid("tok", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no token %.64s", id);
        return;
    }
    if (store_token_revoke(rq->db, id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    auth_cache_forget(id); /* here at once; other controllers by NOTIFY */
    log_info("controller", "token %s revoked by %s", id, rq->auth.token_id);
    http_reply_json(rq, 200, resp);
}
