/* Client endpoints: volumes (docs/volumes.md). A volume is a tenant's row
 * with a size; a sandbox mounts it with create's "volumes", which places the
 * sandbox on the worker the volume lives on. */
#include "api.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool volume_ref_ok(req_t *rq, const char *ref)
{
    if (spec_volume_ref_ok(ref))
        return true;
    http_reply_error(rq, API_NOT_FOUND, "no volume %.64s", ref);
    return false;
}

bool api_tenant_for(req_t *rq, const char *named, const char *verb, char tenant_id[SBX_ID_MAX], policy_t *pol)
{
    const char *tenant = named ? named : rq->auth.tenant;
    if (named && rq->auth.role != ROLE_ADMIN && strcmp(named, rq->auth.tenant) != 0) {
        http_reply_error(rq, API_FORBIDDEN, "this token belongs to tenant %s and cannot %s in tenant %.64s",
                         rq->auth.tenant, verb, named);
        return false;
    }
    policy_t own;
    memset(&own, 0, sizeof own);
    int rc = store_tenant_policy_by_name(rq->db, tenant, tenant_id, pol ? pol : &own);
    policy_release(&own);
    if (rc == SBX_ENOTFOUND)
        http_reply_error(rq, API_NOT_FOUND, "no tenant %.64s", tenant);
    else if (rc < 0)
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
    return rc == 0;
}

void api_volume_create(req_t *rq)
{
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    policy_t pol;
    memset(&pol, 0, sizeof pol);
    const char *idem = NULL;
    if (api_idempotency_key(rq, &idem) < 0 || http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    static const char *const known[] = { "name", "size_mib", "tenant", NULL };
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object {\"name\", \"size_mib\"}");
        goto cleanup;
    }
    json_object_object_foreach(body, key, val) {
        bool k = false;
        for (const char *const *p = known; *p; p++)
            k = k || strcmp(key, *p) == 0;
        if (!k) {
            http_reply_error(rq, API_INVALID_ARGUMENT,
                             "unknown field \"%.64s\" in the volume request (known: name, size_mib, tenant)", key);
            goto cleanup;
        }
        (void)val;
    }
    const char *name = jsonx_get_str(body, "name");
    if (!name || !spec_volume_name_ok(name)) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "name is required: 1 to %d letters, digits, _, . or -, starting with a letter or digit, and "
                         "not starting with vol_ (an id's shape)",
                         SBX_SANDBOX_NAME_MAX);
        goto cleanup;
    }
    json_object *sv = NULL;
    int64_t size = 0;
    if (!json_object_object_get_ex(body, "size_mib", &sv) || !json_object_is_type(sv, json_type_int) ||
        (size = json_object_get_int64(sv)) < SBX_VOLUME_MIB_MIN || size > SBX_VOLUME_MIB_MAX) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "size_mib is required: an integer from %d to %d (MiB)",
                         SBX_VOLUME_MIB_MIN, SBX_VOLUME_MIB_MAX);
        goto cleanup;
    }
    char tenant_id[SBX_ID_MAX];
    if (!api_tenant_for(rq, jsonx_get_str(body, "tenant"), "create", tenant_id, &pol))
        goto cleanup;
    if (store_volume_create(rq->db, &rq->ctl->lim, tenant_id, &pol, name, size, idem, rq->auth.token_id, &resp,
                            &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    http_reply_json(rq, 201, resp);
cleanup:
    policy_release(&pol);
    json_object_put(body);
}

void api_volume_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_volume_list(rq->db, auth_scope(rq), &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_volume_get(req_t *rq, const char *ref)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!volume_ref_ok(rq, ref))
        return;
    if (store_volume_get(rq->db, auth_scope(rq), ref, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_volume_delete(req_t *rq, const char *ref)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!volume_ref_ok(rq, ref))
        return;
    if (store_volume_delete(rq->db, auth_scope(rq), ref, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

int api_spec_volumes(req_t *rq, const char *tenant_id, sandbox_spec_t *spec)
{
    char first_worker[SBX_ID_MAX] = "", first[SBX_ID_MAX] = "";
    for (size_t i = 0; i < spec->nvolumes; i++) {
        char worker[SBX_ID_MAX];
        api_error_t err;
        if (store_volume_resolve(rq->db, tenant_id, &spec->volumes[i], worker, &err) < 0) {
            http_reply_api_error(rq, &err);
            return SBX_EINVAL;
        }
        if (!worker[0])
            continue;
        if (first_worker[0] && strcmp(first_worker, worker) != 0) {
            http_reply_error(rq, API_CONFLICT,
                             "volumes %s and %s live on different workers: a sandbox mounts volumes of one worker "
                             "only (move one: sandbox volumes download, then upload into a new volume)",
                             first, spec->volumes[i].volume);
            return SBX_EINVAL;
        }
        snprintf(first_worker, sizeof first_worker, "%s", worker);
        snprintf(first, sizeof first, "%s", spec->volumes[i].volume);
    }
    return 0;
}
