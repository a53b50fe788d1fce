/* Client endpoints: template builds the server drives (docs/templates.md).
 * POST /v1/templates/{name}/builds makes the build sandbox as a create
 * would and records the build; the reconcile loop runs its steps
 * (store/builds.c). GET reads one build or the template's builds. */
#include "api.h"
#include "db.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool build_template_ok(req_t *rq, const char *name)
{
    if (spec_snapshot_name_ok(name))
        return true;
    http_reply_error(rq, API_INVALID_ARGUMENT,
                     "a template name is 1 to %d letters, digits, _, . or -, starting with a letter or digit",
                     SBX_SNAPSHOT_NAME_MAX);
    return false;
}

int api_build_steps_canon(const controller_t *ctl, json_object *steps, json_object **ret, size_t *ret_bad,
                          api_error_t *err)
{
    *ret = NULL;
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(steps); i++) {
        exec_spec_t ex;
        memset(&ex, 0, sizeof ex);
        if (api_exec_spec(ctl, json_object_array_get_idx(steps, i), &ex, err) < 0) {
            exec_spec_release(&ex);
            json_object_put(out);
            *ret_bad = i;
            return SBX_EINVAL;
        }
        json_object_array_add(out, exec_spec_to_json(&ex));
        exec_spec_release(&ex);
    }
    *ret = out;
    return 0;
}

/* steps: 1..SBX_BUILD_STEPS_MAX exec requests, each checked as POST /exec
 * checks one; *ret the array of their canonical forms. */
static int build_steps(req_t *rq, json_object *steps, json_object **ret)
{
    *ret = NULL;
    size_t n = json_object_is_type(steps, json_type_array) ? json_object_array_length(steps) : 0;
    if (!json_object_is_type(steps, json_type_array) || n > SBX_BUILD_STEPS_MAX) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "steps must be an array of at most %d exec requests (as POST /v1/sandboxes/{id}/exec takes)",
                         SBX_BUILD_STEPS_MAX);
        return SBX_EINVAL;
    }
    api_error_t err;
    size_t bad = 0;
    if (api_build_steps_canon(rq->ctl, steps, ret, &bad, &err) < 0) {
        http_reply_error(rq, err.code, "steps[%zu]: %s", bad, err.message);
        return SBX_EINVAL;
    }
    return 0;
}

void api_build_abandon(req_t *rq, const char *sandbox_id)
{
    json_object *gone = NULL;
    api_error_t err;
    if (store_sandbox_delete(rq->db, &rq->ctl->lim, rq->auth.tenant_id, sandbox_id, NULL, NULL, rq->auth.token_id,
                             &gone, &err) == 0)
        api_kick_if_waiting(rq->ctl, gone);
    json_object_put(gone);
}

void api_build_started(req_t *rq, json_object *created, bool replayed)
{
    if (!replayed)
        api_kick_if_waiting(rq->ctl, created);
    atomic_store(&rq->ctl->builds_active, true);
    controller_kick_reconcile(rq->ctl);
}

void api_build_create(req_t *rq, const char *name)
{
    const char *idem;
    json_object *body = NULL, *steps = NULL, *config = NULL, *created = NULL, *resp = NULL;
    api_error_t err;
    if (!build_template_ok(rq, name) || api_idempotency_key(rq, &idem) < 0 ||
        http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        goto cleanup;
    }
    json_object_object_foreach(body, key, val) {
        (void)val;
        if (strcmp(key, "sandbox") != 0 && strcmp(key, "steps") != 0 && strcmp(key, "config") != 0) {
            http_reply_error(rq, API_INVALID_ARGUMENT,
                             "unknown field \"%.64s\" in the build request (known: sandbox, steps, config)", key);
            goto cleanup;
        }
    }
    /* A retry of a build already made answers with it, before anything
     * is made again. */
    if (idem) {
        int rc = store_build_by_key(rq->db, rq->auth.tenant_id, idem, &resp);
        if (rc == 0) {
            http_reply_json(rq, 202, resp);
            resp = NULL;
            goto cleanup;
        }
        if (rc != SBX_ENOTFOUND) {
            http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
            goto cleanup;
        }
    }
    json_object *sv = NULL, *cv = NULL;
    json_object_object_get_ex(body, "steps", &sv);
    if (build_steps(rq, sv, &steps) < 0)
        goto cleanup;
    json_object_object_get_ex(body, "config", &cv);
    if (spec_snapshot_config_from_json(cv, &config, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    /* The build sandbox: the create's own request, in the caller's tenant. */
    json_object *sb = NULL;
    if (json_object_object_get_ex(body, "sandbox", &sb) && !json_object_is_type(sb, json_type_null) &&
        !json_object_is_type(sb, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "sandbox must be a create request (as POST /v1/sandboxes takes: image or template, limits)");
        goto cleanup;
    }
    json_object *create = json_object_new_object();
    if (sb && json_object_is_type(sb, json_type_object)) {
        json_object_object_foreach(sb, k, v) {
            json_object_object_add(create, k, json_object_get(v));
        }
    }
    json_object *tv = NULL;
    if (json_object_object_get_ex(create, "tenant", &tv) && !json_object_is_type(tv, json_type_null) &&
        (!json_object_is_type(tv, json_type_string) || strcmp(json_object_get_string(tv), rq->auth.tenant) != 0)) {
        json_object_put(create);
        http_reply_error(rq, API_FORBIDDEN, "a build runs in the caller's tenant (%s)", rq->auth.tenant);
        goto cleanup;
    }
    if (json_object_object_get_ex(create, "name", &tv)) {
        json_object_put(create);
        http_reply_error(rq, API_INVALID_ARGUMENT, "a build sandbox has no name of its own");
        goto cleanup;
    }
    if (!json_object_object_get_ex(create, "ttl_seconds", &tv))
        jsonx_add_int(create, "ttl_seconds", SBX_BUILD_TTL_SECONDS_DEFAULT);
    int64_t active = 0;
    if (store_build_active_count(rq->db, rq->auth.tenant_id, &active) < 0) {
        json_object_put(create);
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        goto cleanup;
    }
    if (active >= SBX_BUILDS_ACTIVE_MAX) {
        json_object_put(create);
        http_reply_error(rq, API_QUOTA_EXCEEDED,
                         "tenant %s has %lld template builds under way (at most %d); wait for one to finish",
                         rq->auth.tenant, (long long)active, SBX_BUILDS_ACTIVE_MAX);
        goto cleanup;
    }
    char ckey[160]; /* a key is at most 128 characters */
    if (idem)
        snprintf(ckey, sizeof ckey, "tb-%s", idem);
    bool replayed = false;
    int rc = api_sandbox_create_json(rq, create, idem ? ckey : NULL, &created, &replayed);
    json_object_put(create);
    if (rc < 0)
        goto cleanup; /* answered */
    const char *sbx = jsonx_get_str(jsonx_get_obj(created, "sandbox"), "id");
    const char *op = jsonx_get_str(jsonx_get_obj(created, "operation"), "id");
    build_req_t br = { .tenant_id = rq->auth.tenant_id, .template_name = name, .sandbox_id = sbx ? sbx : "",
                       .create_op_id = op ? op : "", .steps = steps, .config = config, .idempotency_key = idem,
                       .created_by = rq->auth.token_id };
    if (store_build_create(rq->db, &br, &resp, &err) < 0) {
        if (sbx)
            api_build_abandon(rq, sbx);
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    api_build_started(rq, created, replayed);
    http_reply_json(rq, 202, resp);
    resp = NULL;
cleanup:
    json_object_put(resp);
    json_object_put(created);
    json_object_put(config);
    json_object_put(steps);
    json_object_put(body);
}

void api_build_list(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!build_template_ok(rq, name))
        return;
    if (store_build_list(rq->db, rq->auth.tenant_id, name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_build_get(req_t *rq, const char *name, const char *id)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!build_template_ok(rq, name))
        return;
    if (!ids_valid("bld", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no build %.64s", id);
        return;
    }
    if (store_build_get(rq->db, rq->auth.tenant_id, name, id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}
