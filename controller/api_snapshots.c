/* Client endpoints: snapshots (docs/snapshots.md). Making one is an
 * operation on its sandbox (POST /v1/sandboxes/{id}/snapshots); listing,
 * reading and deleting them go by id or name under /v1/snapshots. */
#include "api.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool snapshot_ref_ok(req_t *rq, const char *ref)
{
    if (spec_snapshot_ref_ok(ref))
        return true;
    http_reply_error(rq, API_NOT_FOUND, "no snapshot %.64s", ref);
    return false;
}

void api_snapshot_create(req_t *rq, const char *id)
{
    const char *idem;
    json_object *body = NULL, *resp = NULL, *config = NULL;
    api_error_t err;
    if (!ids_valid("sbx", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no sandbox %.64s", id);
        return;
    }
    if (api_idempotency_key(rq, &idem) < 0 || http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        goto cleanup;
    }
    static const char *const known[] = { "name", "template", "config", "memory", NULL };
    const char *name = NULL, *tmpl = NULL;
    bool memory = false;
    json_object_object_foreach(body, key, val) {
        bool k = false;
        for (const char *const *p = known; *p; p++)
            k = k || strcmp(key, *p) == 0;
        if (!k) {
            http_reply_error(rq, API_INVALID_ARGUMENT,
                             "unknown field \"%.64s\" in the snapshot request (known: name, template, config, "
                             "memory)", key);
            goto cleanup;
        }
        (void)val;
    }
    json_object *nv = NULL;
    if (json_object_object_get_ex(body, "name", &nv) && !json_object_is_type(nv, json_type_null)) {
        if (!json_object_is_type(nv, json_type_string) || !spec_snapshot_name_ok(json_object_get_string(nv))) {
            http_reply_error(rq, API_INVALID_ARGUMENT,
                             "name must be 1 to %d letters, digits, _, . or -, starting with a letter or digit, and "
                             "must not start with snp_ (an id's shape)",
                             SBX_SNAPSHOT_NAME_MAX);
            goto cleanup;
        }
        name = json_object_get_string(nv);
    }
    if (json_object_object_get_ex(body, "template", &nv) && !json_object_is_type(nv, json_type_null)) {
        if (!json_object_is_type(nv, json_type_string) || !spec_snapshot_name_ok(json_object_get_string(nv))) {
            http_reply_error(rq, API_INVALID_ARGUMENT,
                             "template must be 1 to %d letters, digits, _, . or -, starting with a letter or digit",
                             SBX_SNAPSHOT_NAME_MAX);
            goto cleanup;
        }
        tmpl = json_object_get_string(nv);
    }
    if (json_object_object_get_ex(body, "memory", &nv) && !json_object_is_type(nv, json_type_null)) {
        if (!json_object_is_type(nv, json_type_boolean)) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "memory must be true or false");
            goto cleanup;
        }
        memory = json_object_get_boolean(nv);
    }
    if (name && tmpl) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "name and template exclude each other (a template's versions "
                                                   "are named by the template and a number)");
        goto cleanup;
    }
    json_object *cv = NULL;
    json_object_object_get_ex(body, "config", &cv);
    if (cv && !json_object_is_type(cv, json_type_null) && !tmpl) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "config is for a template version (give template too)");
        goto cleanup;
    }
    if (spec_snapshot_config_from_json(cv, &config, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    /* the same key with the same request replays; with another, 409 */
    char hash[65];
    unsigned char h[32];
    char *ctext = jsonx_dump(config);
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    const char *parts[] = { "snapshot", id, name ? name : "", tmpl ? tmpl : "", ctext ? ctext : "",
                            memory ? "memory" : "" };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        crypto_generichash_update(&st, (const unsigned char *)parts[i], strlen(parts[i]) + 1);
    crypto_generichash_final(&st, h, sizeof h);
    free(ctext);
    sodium_bin2hex(hash, sizeof hash, h, sizeof h);
    if (store_snapshot_create(rq->db, &rq->ctl->lim, auth_scope(rq), id, name, tmpl, config, memory, idem, hash,
                              rq->auth.token_id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    api_kick_if_waiting(rq->ctl, resp);
    http_reply_json(rq, 202, resp);
cleanup:
    json_object_put(config);
    json_object_put(body);
}

void api_snapshot_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    const char *sbx = http_query(rq, "sandbox");
    if (sbx && !ids_valid("sbx", sbx)) {
        if (!api_sandbox_ref(rq, &sbx))
            return;
        if (!ids_valid("sbx", sbx)) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "sandbox must be a sandbox id or name");
            return;
        }
    }
    if (store_snapshot_list(rq->db, auth_scope(rq), sbx, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_snapshot_get(req_t *rq, const char *ref)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!snapshot_ref_ok(rq, ref))
        return;
    if (store_snapshot_get(rq->db, auth_scope(rq), ref, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_snapshot_delete(req_t *rq, const char *ref)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!snapshot_ref_ok(rq, ref))
        return;
    if (store_snapshot_delete(rq->db, auth_scope(rq), ref, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_snapshot_copy(req_t *rq, const char *ref)
{
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    if (!snapshot_ref_ok(rq, ref) || http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    const char *worker = jsonx_get_str(body, "worker");
    if (!json_object_is_type(body, json_type_object) || json_object_object_length(body) != 1 || !worker ||
        !*worker || strlen(worker) > SBX_MAX_NAME_BYTES) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the copy request is {\"worker\": NAME}: the worker to copy to");
        goto cleanup;
    }
    if (store_snapshot_copy_create(rq->db, &rq->ctl->lim, auth_scope(rq), ref, worker, rq->auth.token_id, &resp,
                                   &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    http_reply_json(rq, 202, resp);
cleanup:
    json_object_put(body);
}

/* ---- templates ---------------------------------------------------------- */

static bool template_name_ok(req_t *rq, const char *name)
{
    if (spec_snapshot_name_ok(name))
        return true;
    http_reply_error(rq, API_NOT_FOUND, "no template %.64s", name);
    return false;
}

void api_template_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_template_list(rq->db, auth_scope(rq), &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_template_get(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    if (!template_name_ok(rq, name))
        return;
    if (store_template_get(rq->db, rq->auth.tenant_id, name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_template_delete(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    int64_t version = 0;
    const char *v = http_query(rq, "version");
    if (!template_name_ok(rq, name))
        return;
    if (v) {
        char *end = NULL;
        long long n = strtoll(v, &end, 10);
        if (!*v || *end || n < 1 || n > 1000000000) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "version must be a version number (1, 2, ...)");
            return;
        }
        version = n;
    }
    if (store_template_delete(rq->db, rq->auth.tenant_id, name, version, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}
