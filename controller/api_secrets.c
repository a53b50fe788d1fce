/* Client endpoints: secrets at egress (docs/network.md#secrets-at-egress).
 * A tenant's header value bound to hosts; a sandbox created with its name
 * sends requests to those hosts without it and its worker's egress filter
 * adds it. Write-only: no answer ever carries a value. */
#include "api.h"
#include "db.h"
#include "egress.h"
#include "egress_peek.h"
#include "jsonx.h"
#include "limits.h"
#include "utf8.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SECRET_VALUE_MAX  4096
#define SECRET_HEADER_MAX 64
#define SECRET_HOSTS_MAX  16

/* POST /v1/secrets {"name","header","hosts":[…],"value","tenant"?} */
void api_secret_create(req_t *rq)
{
    json_object *body = NULL, *resp = NULL, *hosts = NULL, *canon = NULL;
    api_error_t err;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    static const char *const known[] = { "name", "header", "hosts", "value", "tenant", NULL };
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        goto cleanup;
    }
    json_object_object_foreach(body, key, val) {
        bool k = false;
        for (const char *const *p = known; *p; p++)
            k = k || strcmp(key, *p) == 0;
        if (!k) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "unknown field \"%.64s\" in the secret (known: name, header, "
                             "hosts, value, tenant)", key);
            goto cleanup;
        }
        (void)val;
    }
    const char *name = jsonx_get_str(body, "name"), *header = jsonx_get_str(body, "header");
    const char *value = jsonx_get_str(body, "value");
    if (!name || !spec_secret_name_ok(name)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "name is required: 1 to %d letters, digits, _, . or -, starting "
                         "with a letter or digit", SBX_SANDBOX_NAME_MAX);
        goto cleanup;
    }
    if (!header || !egress_header_name_ok(header)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "header is required: an HTTP header name (as Authorization), at "
                         "most %d characters, not one the filter sets itself (Host, Connection, …)",
                         SECRET_HEADER_MAX);
        goto cleanup;
    }
    if (!value || !*value || strlen(value) > SECRET_VALUE_MAX || !utf8_valid(value, strlen(value)) ||
        utf8_has_control(value)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "value is required: the header's value, 1 to %d printable "
                         "bytes (no line breaks)", SECRET_VALUE_MAX);
        goto cleanup;
    }
    hosts = jsonx_get_arr(body, "hosts");
    size_t nh = hosts ? json_object_array_length(hosts) : 0;
    if (nh == 0 || nh > SECRET_HOSTS_MAX) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "hosts is required: 1 to %d domains (example.com or "
                         "*.example.com) the header is added for", SECRET_HOSTS_MAX);
        goto cleanup;
    }
    canon = json_object_new_array();
    for (size_t i = 0; i < nh; i++) {
        json_object *h = json_object_array_get_idx(hosts, i);
        char c[EGRESS_DOMAIN_MAX + 1], why[160];
        if (!json_object_is_type(h, json_type_string) ||
            egress_domain_canon(json_object_get_string(h), c, why, sizeof why) < 0) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "hosts[%zu]: %s", i,
                             json_object_is_type(h, json_type_string) ? why : "a domain");
            goto cleanup;
        }
        json_object_array_add(canon, json_object_new_string(c));
    }
    char tenant_id[SBX_ID_MAX];
    if (!api_tenant_for(rq, jsonx_get_str(body, "tenant"), "act", tenant_id, NULL))
        goto cleanup;
    if (store_secret_create(rq->db, &rq->ctl->lim, tenant_id, name, header, canon, value, rq->auth.token_id, &resp,
                            &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    http_reply_json(rq, 201, resp);
cleanup:
    json_object_put(canon);
    if (body) { /* the value is not left in freed memory */
        json_object *v = NULL;
        if (json_object_object_get_ex(body, "value", &v) && json_object_is_type(v, json_type_string))
            sodium_memzero((void *)json_object_get_string(v), (size_t)json_object_get_string_len(v));
        json_object_put(body);
    }
}

void api_secret_list(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_secret_list(rq->db, auth_scope(rq), &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

/* DELETE /v1/secrets/{name}[?tenant=T] */
void api_secret_delete(req_t *rq, const char *name)
{
    json_object *resp = NULL;
    api_error_t err;
    char tenant_id[SBX_ID_MAX];
    if (!spec_secret_name_ok(name)) {
        http_reply_error(rq, API_NOT_FOUND, "no secret %.64s", name);
        return;
    }
    if (!api_tenant_for(rq, http_query(rq, "tenant"), "act", tenant_id, NULL))
        return;
    if (store_secret_delete(rq->db, tenant_id, name, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}
