/* Client endpoints: sandboxes, exec and operations. */
#include "api.h"
#include "db.h"
#include "ids.h"
#include "imageref.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "opstate.h"
#include "token.h"

#include <errno.h>
#include <event2/buffer.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hex BLAKE2b of the parts, for idempotency comparisons. */
static void request_hash(const char *a, const char *b, char out[65])
{
    crypto_generichash_state st;
    unsigned char h[32];
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const unsigned char *)a, strlen(a));
    crypto_generichash_update(&st, (const unsigned char *)"\n", 1);
    crypto_generichash_update(&st, (const unsigned char *)b, strlen(b));
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(out, 65, h, sizeof h);
}

int api_idempotency_key(req_t *rq, const char **ret)
{
    const char *k = http_header(rq, "Idempotency-Key");
    *ret = NULL;
    if (!k)
        return 0;
    size_t n = strlen(k);
    bool ok = n > 0 && n <= 128;
    for (size_t i = 0; ok && i < n; i++)
        if ((unsigned char)k[i] < 0x21 || (unsigned char)k[i] > 0x7e)
            ok = false;
    if (!ok) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "Idempotency-Key must be 1 to 128 printable ASCII characters");
        return SBX_EINVAL;
    }
    *ret = k;
    return 0;
}

static bool id_ok(req_t *rq, const char *prefix, const char *id, const char *what)
{
    if (ids_valid(prefix, id))
        return true;
    http_reply_error(rq, API_NOT_FOUND, "no %s %.64s", what, id);
    return false;
}

bool api_sandbox_ref(req_t *rq, const char **id)
{
    if (!*id || ids_valid("sbx", *id) || !spec_sandbox_name_ok(*id))
        return true;
    api_error_t err;
    if (store_sandbox_by_name(rq->db, auth_scope(rq), rq->auth.tenant_id, *id, rq->sandbox_id, &err) < 0) {
        http_reply_api_error(rq, &err);
        return false;
    }
    *id = rq->sandbox_id;
    return true;
}

/* One limit (policy_check_limit); replies 422 naming the rule on a denial. */
static int check_limit(req_t *rq, const char *field, int64_t asked, const char *rule, int64_t server, int64_t tenant)
{
    api_error_t err;
    if (policy_check_limit(field, asked, rule, server, tenant, &err) == 0)
        return 0;
    http_reply_api_error(rq, &err);
    return SBX_EINVAL;
}

/* Per-sandbox rules of the server and the tenant; replies 422 on a denial. */
static int policy_check_spec(req_t *rq, const sandbox_spec_t *s, const policy_t *p)
{
    controller_t *ctl = rq->ctl;
    if (check_limit(rq, "cpu_millis", s->cpu_millis, "max_cpu_millis", ctl->max_cpu_millis, p->max_cpu_millis) < 0 ||
        check_limit(rq, "memory_mib", s->memory_mib, "max_memory_mib", ctl->max_memory_mib, p->max_memory_mib) < 0 ||
        check_limit(rq, "disk_mib", s->disk_mib, "max_disk_mib", ctl->max_disk_mib, p->max_disk_mib) < 0 ||
        check_limit(rq, "ttl_seconds", s->ttl_seconds, "max_ttl_seconds", ctl->max_ttl_seconds, p->max_ttl_seconds) < 0)
        return SBX_EINVAL;
    /* The image's registry: the server's rule (image_registries and the
     * address rule), then the tenant's narrowing, before anything is pulled. */
    char reg[SBX_MAX_REGISTRY_BYTES + 1] = "", why[400];
    if (spec_image_is_snapshot(s->image)) {
        http_reply_error(rq, API_POLICY_DENIED,
                         "image %.200s names the snapshot repository %s: start from a snapshot with from (sandbox "
                         "create --from NAME)", s->image, SPEC_SNAPSHOT_REPO);
        return SBX_EINVAL;
    }
    if (imageref_check(cfg_str(&ctl->cfg, CFG_IMAGE_REGISTRIES), s->image, why, sizeof why) < 0) {
        http_reply_error(rq, API_POLICY_DENIED, "%s", why);
        return SBX_EINVAL;
    }
    if (imageref_registry(s->image, reg, sizeof reg) < 0 || !policy_registry_allowed(p, reg)) {
        http_reply_error(rq, API_POLICY_DENIED, "registry %s of image %s is not in the tenant policy registries", reg,
                         s->image);
        return SBX_EINVAL;
    }
    if (!policy_image_allowed(p, s->image)) {
        /* Name what is allowed, so the next try can be right. */
        char allowed[240] = "";
        size_t used = 0, i = 0;
        for (; i < p->n_images; i++) {
            size_t need = strlen(p->images[i]) + (i ? 2 : 0);
            if (used + need + 1 > sizeof allowed - 24)
                break;
            used += (size_t)snprintf(allowed + used, sizeof allowed - used, "%s%s", i ? ", " : "", p->images[i]);
        }
        if (i < p->n_images)
            snprintf(allowed + used, sizeof allowed - used, "%s%zu more", i ? ", and " : "", p->n_images - i);
        http_reply_error(rq, API_POLICY_DENIED,
                         "image %s is not in the tenant policy images allowlist (allowed: %s); use one of those, "
                         "or ask an admin to add it to the tenant's policy",
                         s->image, p->n_images ? allowed : "none");
        return SBX_EINVAL;
    }
    if (!policy_network_allowed(p, s->network)) {
        http_reply_error(rq, API_POLICY_DENIED, "network %s is not among the tenant policy network_modes",
                         net_mode_name(s->network));
        return SBX_EINVAL;
    }
    return 0;
}

int api_spec_admit(req_t *rq, sandbox_spec_t *spec, const policy_t *policy, classification_t *ret_cls)
{
    controller_t *ctl = rq->ctl;
    api_error_t err;
    /* No disk_mib: the server default, within the ceilings that bind this
     * tenant (a default above them would refuse every plain create), but
     * never below the spec's minimum (a tenant ceiling under it refuses). */
    if (spec->disk_mib == 0) {
        int64_t cap = policy_tighter(ctl->max_disk_mib, policy->max_disk_mib);
        spec->disk_mib = ctl->default_disk_mib < cap ? ctl->default_disk_mib : cap;
        if (spec->disk_mib < SBX_DISK_MIB_MIN)
            spec->disk_mib = SBX_DISK_MIB_MIN;
    }
    if (policy_check_spec(rq, spec, policy) < 0)
        return SBX_EINVAL;
    /* Egress by domain: the request's rules within the tenant's (a
     * request without rules gets the tenant's); only open reaches out. */
    if (spec->network == NET_OPEN && (spec->egress.set || policy->egress.set)) {
        egress_rules_t eff;
        if (egress_rules_within(&policy->egress, &spec->egress, "egress", &eff, &err) < 0) {
            http_reply_api_error(rq, &err);
            return SBX_EINVAL;
        }
        egress_rules_release(&spec->egress);
        spec->egress = eff;
    }
    if (spec->nsecrets > 0 && !spec->egress.set) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "secrets are added by the worker's egress filter: they need "
                         "egress rules (--allow/--deny, or egress in the request or the tenant's policy)");
        return SBX_EINVAL;
    }
    /* Classify: the minimum isolation class, the hardening and the network
     * rules for untrusted work. Placement never runs it on a weaker class. */
    classify_rules_t rules = ctl->rules;
    classify_rules_tenant(&rules, policy);
    if (classify(spec, &rules, ret_cls, &err) < 0) {
        http_reply_api_error(rq, &err);
        return SBX_EINVAL;
    }
    spec->hardened = ret_cls->hardened;
    return 0;
}

/* Kicks the reconcile loop when the request's operation was left for it
 * (pending or admitted: a create behind others waiting for room, a delete
 * behind its sandbox's create); one admitted and placed in its request's
 * transaction needs no turn of the loop. */
void api_kick_if_waiting(controller_t *ctl, json_object *resp)
{
    const char *st = jsonx_get_str(jsonx_get_obj(resp, "operation"), "state");
    if (!st || strcmp(st, "pending") == 0 || strcmp(st, "admitted") == 0)
        controller_kick_reconcile(ctl);
}

int api_spec_from_snapshot(req_t *rq, const char *tenant_id, sandbox_spec_t *spec, bool image_given, bool is_template,
                           isolation_t *ret_iso)
{
    char id[SBX_ID_MAX], base[SBX_MAX_IMAGE_BYTES + 1];
    api_error_t err;
    if ((is_template ? store_template_resolve(rq->db, tenant_id, spec->from, id, base, sizeof base, ret_iso, &err)
                     : store_snapshot_resolve(rq->db, tenant_id, spec->from, id, base, sizeof base, ret_iso, &err)) <
        0) {
        http_reply_api_error(rq, &err);
        return SBX_EINVAL;
    }
    if (image_given && strcmp(spec->image, base) != 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "snapshot %s holds the files of image %s: leave image out (or name that one), not %.200s",
                         spec->from, base, spec->image);
        return SBX_EINVAL;
    }
    char *img = strdup(base), *from = strdup(id);
    if (!img || !from) {
        free(img);
        free(from);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return SBX_ENOMEM;
    }
    free(spec->image);
    free(spec->from);
    spec->image = img;
    spec->from = from;
    return 0;
}

void api_sandbox_create(req_t *rq)
{
    json_object *body = NULL, *resp = NULL;
    const char *idem;
    if (api_idempotency_key(rq, &idem) < 0)
        return;
    if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
        return;
    bool replayed = false;
    int rc = api_sandbox_create_json(rq, body, idem, &resp, &replayed);
    json_object_put(body);
    if (rc < 0)
        return;
    if (!replayed)
        api_kick_if_waiting(rq->ctl, resp);
    http_reply_json(rq, 202, resp);
}

int api_sandbox_create_json(req_t *rq, json_object *body, const char *idem, json_object **ret, bool *ret_replayed)
{
    controller_t *ctl = rq->ctl;
    json_object *resp = NULL, *classification = NULL;
    sandbox_spec_t spec;
    policy_t policy;
    api_error_t err;
    int result = SBX_EINVAL;
    memset(&spec, 0, sizeof spec);
    policy_init(&policy);
    *ret = NULL;
    /* "name" is the sandbox's, not the runtime's: kept out of the spec. */
    char name[SBX_SANDBOX_NAME_MAX + 1] = "";
    json_object *nv = NULL;
    if (json_object_is_type(body, json_type_object) && json_object_object_get_ex(body, "name", &nv)) {
        if (!json_object_is_type(nv, json_type_null)) {
            if (!json_object_is_type(nv, json_type_string) || !spec_sandbox_name_ok(json_object_get_string(nv))) {
                http_reply_error(rq, API_INVALID_ARGUMENT,
                                 "name must be 1 to %d letters, digits, _, . or -, starting with a letter or digit, "
                                 "and must not start with sbx_ (an id's shape)",
                                 SBX_SANDBOX_NAME_MAX);
                goto cleanup;
            }
            snprintf(name, sizeof name, "%s", json_object_get_string(nv));
        }
        json_object_object_del(body, "name");
    }
    /* "template": NAME or NAME:VERSION, a template's version to start
     * from (its snapshot), kept out of the spec: the spec gets "from". */
    char tmpl[SBX_SNAPSHOT_NAME_MAX + 16] = "";
    if (json_object_is_type(body, json_type_object) && json_object_object_get_ex(body, "template", &nv)) {
        if (!json_object_is_type(nv, json_type_null)) {
            const char *t = json_object_is_type(nv, json_type_string) ? json_object_get_string(nv) : NULL;
            if (!t || strlen(t) >= sizeof tmpl || !*t) {
                http_reply_error(rq, API_INVALID_ARGUMENT, "template must be NAME or NAME:VERSION");
                goto cleanup;
            }
            snprintf(tmpl, sizeof tmpl, "%s", t);
        }
        json_object_object_del(body, "template");
    }
    /* With "from", the image is the snapshot's: one named must be it. */
    json_object *iv = NULL;
    bool image_given = json_object_is_type(body, json_type_object) && json_object_object_get_ex(body, "image", &iv) &&
                       !json_object_is_type(iv, json_type_null);
    /* A request without an image gets the server's default_image, before
     * policy: the tenant's allowlist judges the image actually used. */
    if (spec_from_json_default(body, cfg_str(&ctl->cfg, CFG_DEFAULT_IMAGE), &spec, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    if (!spec.tenant) {
        spec.tenant = strdup(rq->auth.tenant);
    } else if (rq->auth.role != ROLE_ADMIN && strcmp(spec.tenant, rq->auth.tenant) != 0) {
        http_reply_error(rq, API_FORBIDDEN, "this token belongs to tenant %s and cannot create in tenant %s",
                         rq->auth.tenant, spec.tenant);
        goto cleanup;
    }
    char tenant_id[SBX_ID_MAX];
    /* Never made on the fly, not even for an admin: a typo'd tenant would
     * otherwise become a new tenant with no policy. Tenants are made with
     * POST /v1/tenants (`sandbox tenants create`). */
    int rc = store_tenant_policy_by_name(rq->db, spec.tenant, tenant_id, &policy);
    if (rc == SBX_ENOTFOUND) {
        http_reply_error(rq, API_NOT_FOUND, "no tenant %s (an admin makes one with: sandbox tenants create %s)",
                         spec.tenant, spec.tenant);
        goto cleanup;
    }
    if (rc < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        goto cleanup;
    }
    if (tmpl[0] && spec.from) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "from and template exclude each other");
        goto cleanup;
    }
    if (tmpl[0] && !(spec.from = strdup(tmpl))) {
        http_reply_error(rq, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    isolation_t snap_iso = ISO_CONTAINER;
    if (spec.from && api_spec_from_snapshot(rq, tenant_id, &spec, image_given, tmpl[0] != 0, &snap_iso) < 0)
        goto cleanup;
    if (spec.nvolumes > 0 && api_spec_volumes(rq, tenant_id, &spec) < 0)
        goto cleanup;
    if (spec.nsecrets > 0 && store_secrets_check(rq->db, tenant_id, spec.secrets, spec.nsecrets, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    classification_t cls;
    if (api_spec_admit(rq, &spec, &policy, &cls) < 0)
        goto cleanup;
    /* A microvm snapshot's disk runs only in a microvm: it raises the need.
     * (A container's or gvisor's snapshot, an image, also starts a microvm
     * with its files, on a worker that holds it and offers microvm.) */
    if (spec.from && snap_iso == ISO_MICROVM && cls.isolation < ISO_MICROVM) {
        cls.isolation = ISO_MICROVM;
        if (cls.nreasons < CLASSIFY_MAX_REASONS)
            snprintf(cls.reasons[cls.nreasons++], sizeof cls.reasons[0],
                     "isolation microvm: it starts from a microvm snapshot (its disk)");
    }
    isolation_t iso = cls.isolation;
    classification = classification_to_json(&cls);
    json_object *canon = spec_to_json(&spec);
    if (name[0])
        jsonx_add_str(canon, "name", name);
    char *canon_text = jsonx_dump(canon);
    json_object_put(canon);
    char hash[65];
    request_hash("create", canon_text ? canon_text : "", hash);
    free(canon_text);
    create_req_t cr = { .tenant_id = tenant_id, .spec = &spec, .isolation = iso, .classification = classification,
                        .idempotency_key = idem,
                        .request_hash = hash, .created_by = rq->auth.token_id, .name = name[0] ? name : NULL,
                        .policy = &policy };
    /* A warm pool may serve it unless an open sandbox needs the tenant's
     * egress_allow rules or egress rules (set on a sandbox when it is made). */
    char pool_key[SBX_MAX_IMAGE_BYTES + 160];
    bool egress_rules = spec.network == NET_OPEN && (policy.egress_allow_set || spec.egress.set);
    if (!egress_rules && !spec.from && spec.nvolumes == 0 && store_pool_key(&spec, iso, pool_key, sizeof pool_key))
        cr.pool_key = pool_key;
    if (store_sandbox_create(rq->db, &ctl->lim, &cr, &resp, ret_replayed, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    *ret = resp;
    result = 0;
cleanup:
    spec_release(&spec);
    policy_release(&policy);
    if (classification)
        json_object_put(classification);
    return result;
}

/* "K=V,K2=V2" into a JSON object's text (malloc'd), each pair checked as a
 * create's labels are. */
static int list_labels_json(const char *q, char **ret, api_error_t *err)
{
    json_object *o = json_object_new_object();
    char buf[4096];
    if (strlen(q) >= sizeof buf) {
        json_object_put(o);
        return api_error_set(err, API_INVALID_ARGUMENT, "label must be at most %zu bytes", sizeof buf - 1);
    }
    snprintf(buf, sizeof buf, "%s", q);
    for (char *p = buf, *next; p; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(p, '=');
        if (!eq || eq == p) {
            json_object_put(o);
            return api_error_set(err, API_INVALID_ARGUMENT, "label must be K=V pairs, comma-separated (got \"%.64s\")",
                                 p);
        }
        *eq = '\0';
        jsonx_add_str(o, p, eq + 1);
    }
    kv_list_t kv;
    memset(&kv, 0, sizeof kv);
    int rc = kv_list_from_json(o, "label", false, SBX_MAX_LABELS, &kv, err);
    kv_list_release(&kv);
    if (rc == 0)
        *ret = jsonx_dump(o);
    json_object_put(o);
    return rc;
}

static bool list_phases_ok(const char *q)
{
    char buf[256];
    if (!*q || strlen(q) >= sizeof buf)
        return false;
    snprintf(buf, sizeof buf, "%s", q);
    for (char *p = buf, *next; p; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        sandbox_phase_t ph;
        if (sandbox_phase_parse(p, &ph) < 0)
            return false;
    }
    return true;
}

void api_sandbox_list(req_t *rq)
{
    const char *tenant = http_query(rq, "tenant");
    const char *all = http_query(rq, "all");
    const char *lim = http_query(rq, "limit");
    int limit = SBX_LIST_DEFAULT;
    if (lim) {
        char *end;
        long v = strtol(lim, &end, 10);
        if (end == lim || *end || v < 1 || v > SBX_LIST_MAX) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "limit must be 1 to %d", SBX_LIST_MAX);
            return;
        }
        limit = (int)v;
    }
    json_object *resp = NULL;
    api_error_t err;
    bool include_deleted = all && (strcmp(all, "true") == 0 || strcmp(all, "1") == 0);
    const char *after = http_query(rq, "after");
    if (after && !store_list_cursor_valid(after)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "after must be the next cursor of a previous list answer");
        return;
    }
    /* label=K=V,K2=V2: sandboxes with all those labels (as kubectl -l);
     * phase=P,P2: in one of those phases (deleted ones too when named). */
    const char *label = http_query(rq, "label"), *phase = http_query(rq, "phase");
    char *labels_json = NULL;
    if (label && list_labels_json(label, &labels_json, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (phase && !list_phases_ok(phase)) {
        free(labels_json);
        http_reply_error(rq, API_INVALID_ARGUMENT,
                         "phase must be a comma-separated list of pending, scheduled, provisioning, running, deleting, "
                         "deleted, failed, lost");
        return;
    }
    int rc = store_sandbox_list(rq->db, auth_scope(rq), tenant, include_deleted, limit, after, labels_json, phase,
                                &resp, &err);
    free(labels_json);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_sandbox_get(req_t *rq, const char *id)
{
    if (!id_ok(rq, "sbx", id, "sandbox"))
        return;
    json_object *resp = NULL;
    api_error_t err;
    if (store_sandbox_get(rq->db, auth_scope(rq), id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_sandbox_delete(req_t *rq, const char *id)
{
    const char *idem;
    if (!id_ok(rq, "sbx", id, "sandbox") || api_idempotency_key(rq, &idem) < 0)
        return;
    char hash[65];
    request_hash("delete", id, hash);
    json_object *resp = NULL;
    api_error_t err;
    if (store_sandbox_delete(rq->db, &rq->ctl->lim, auth_scope(rq) ? auth_scope(rq) : NULL, id, idem, hash,
                             rq->auth.token_id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    api_kick_if_waiting(rq->ctl, resp);
    http_reply_json(rq, 202, resp);
}

int api_exec_spec(const controller_t *ctl, json_object *body, exec_spec_t *ex, api_error_t *err)
{
    if (exec_spec_from_json(body, ex, err) < 0)
        return SBX_EINVAL;
    if (ex->max_output_bytes > ctl->exec_output_max)
        return api_error_set(err, API_POLICY_DENIED,
                             "max_output_bytes %lld is over the server ceiling exec_output_max_bytes = %lld",
                             (long long)ex->max_output_bytes, (long long)ctl->exec_output_max);
    if (ex->timeout_seconds > ctl->exec_timeout_max)
        return api_error_set(err, API_POLICY_DENIED,
                             "timeout_seconds %lld is over the server ceiling exec_timeout_max_seconds = %lld",
                             (long long)ex->timeout_seconds, (long long)ctl->exec_timeout_max);
    return 0;
}

void api_sandbox_exec(req_t *rq, const char *id)
{
    controller_t *ctl = rq->ctl;
    const char *idem;
    if (!id_ok(rq, "sbx", id, "sandbox") || api_idempotency_key(rq, &idem) < 0)
        return;
    json_object *body = NULL, *resp = NULL;
    exec_spec_t ex;
    api_error_t err;
    memset(&ex, 0, sizeof ex);
    if (http_read_json(rq, (size_t)ctl->max_body_client, &body) < 0)
        return;
    if (api_exec_spec(ctl, body, &ex, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    json_object *canon = exec_spec_to_json(&ex);
    char *canon_text = jsonx_dump(canon);
    char hash[65], scope_key[128];
    snprintf(scope_key, sizeof scope_key, "exec %s", id);
    request_hash(scope_key, canon_text ? canon_text : "", hash);
    free(canon_text);
    int rc = store_exec_create(rq->db, &ctl->lim, auth_scope(rq), id, canon, idem, hash, rq->auth.token_id, &resp,
                               &err);
    json_object_put(canon);
    if (rc < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    api_kick_if_waiting(ctl, resp);
    http_reply_json(rq, 202, resp);
cleanup:
    exec_spec_release(&ex);
    if (body)
        json_object_put(body);
}

/* POST /v1/sandboxes/{id}/pause and /resume: no body (or {}). */
static void sandbox_pause(req_t *rq, const char *id, bool resume)
{
    const char *idem;
    if (!id_ok(rq, "sbx", id, "sandbox") || api_idempotency_key(rq, &idem) < 0)
        return;
    if (evbuffer_get_length(evhttp_request_get_input_buffer(rq->ev)) > 0) {
        json_object *body = NULL;
        if (http_read_json(rq, (size_t)rq->ctl->max_body_client, &body) < 0)
            return;
        bool empty = json_object_is_type(body, json_type_object) && json_object_object_length(body) == 0;
        json_object_put(body);
        if (!empty) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "a %s takes no fields (send {} or nothing)",
                             resume ? "resume" : "pause");
            return;
        }
    }
    char hash[65], scope_key[64];
    snprintf(scope_key, sizeof scope_key, "%s %s", resume ? "resume" : "pause", id);
    request_hash(scope_key, "", hash);
    json_object *resp = NULL;
    api_error_t err;
    if (store_sandbox_pause(rq->db, &rq->ctl->lim, auth_scope(rq), id, resume, idem, hash, rq->auth.token_id, &resp,
                            &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    api_kick_if_waiting(rq->ctl, resp);
    http_reply_json(rq, 202, resp);
}

void api_sandbox_pause(req_t *rq, const char *id) { sandbox_pause(rq, id, false); }
void api_sandbox_resume(req_t *rq, const char *id) { sandbox_pause(rq, id, true); }

/* PATCH /v1/sandboxes/{id}/network {"egress":{"allow","deny","default"}}:
 * the sandbox's egress rules from now on (they replace its rules), within
 * its tenant's; 202 with the network operation its worker runs. */
void api_sandbox_network(req_t *rq, const char *id)
{
    controller_t *ctl = rq->ctl;
    const char *idem;
    if (!id_ok(rq, "sbx", id, "sandbox") || api_idempotency_key(rq, &idem) < 0)
        return;
    json_object *body = NULL, *resp = NULL, *eg = NULL;
    api_error_t err;
    egress_rules_t rules;
    memset(&rules, 0, sizeof rules);
    if (http_read_json(rq, (size_t)ctl->max_body_client, &body) < 0)
        return;
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        goto cleanup;
    }
    json_object_object_foreach(body, k, v) {
        (void)v;
        if (strcmp(k, "egress") != 0) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "unknown field \"%.64s\" in a network change (egress only)", k);
            goto cleanup;
        }
    }
    if (!json_object_object_get_ex(body, "egress", &eg) || !eg) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "egress is required: {\"egress\":{\"allow\":[…],\"deny\":[…],"
                         "\"default\":\"deny\"|\"allow\"}}");
        goto cleanup;
    }
    if (egress_rules_from_json(eg, "egress", &rules, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    json_object *canon = egress_rules_to_json(&rules);
    char *canon_text = jsonx_dump(canon);
    json_object_put(canon);
    char hash[65], scope_key[64];
    snprintf(scope_key, sizeof scope_key, "network %s", id);
    request_hash(scope_key, canon_text ? canon_text : "", hash);
    free(canon_text);
    if (store_sandbox_network(rq->db, &ctl->lim, auth_scope(rq), id, &rules, idem, hash, rq->auth.token_id, &resp,
                              &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    api_kick_if_waiting(ctl, resp);
    http_reply_json(rq, 202, resp);
cleanup:
    egress_rules_release(&rules);
    json_object_put(body);
}

void api_sandbox_extend(req_t *rq, const char *id)
{
    controller_t *ctl = rq->ctl;
    const char *idem;
    if (!id_ok(rq, "sbx", id, "sandbox") || api_idempotency_key(rq, &idem) < 0)
        return;
    json_object *body = NULL, *resp = NULL;
    api_error_t err;
    int64_t ttl = 0;
    if (http_read_json(rq, (size_t)ctl->max_body_client, &body) < 0)
        return;
    if (spec_extend_from_json(body, &ttl, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    char hash[65], scope_key[128], canon[32];
    snprintf(scope_key, sizeof scope_key, "extend %s", id);
    snprintf(canon, sizeof canon, "%lld", (long long)ttl);
    request_hash(scope_key, canon, hash);
    extend_req_t er = { .scope = auth_scope(rq), .sandbox_id = id, .ttl_seconds = ttl,
                        .max_ttl_seconds = ctl->max_ttl_seconds, .idempotency_key = idem, .request_hash = hash,
                        .created_by = rq->auth.token_id };
    if (store_sandbox_extend(rq->db, &ctl->lim, &er, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    /* 200, not 202: the operation is finished when this answer is sent. */
    http_reply_json(rq, 200, resp);
cleanup:
    if (body)
        json_object_put(body);
}

/* Adds "url" to a route object: host-based when a route domain is set,
 * else path-based under the public URL. */
static void route_add_url(const controller_t *ctl, json_object *route)
{
    const char *name = jsonx_get_str(route, "name");
    if (!name)
        return;
    char url[512];
    if (ctl->route_domain)
        snprintf(url, sizeof url, "https://%s.%s/", name, ctl->route_domain);
    else
        snprintf(url, sizeof url, "%s/r/%s/", ctl->public_url ? ctl->public_url : "", name);
    jsonx_add_str(route, "url", url);
}

void api_route_share(req_t *rq, const char *sandbox_id)
{
    controller_t *ctl = rq->ctl;
    const char *idem;
    char secret[SBX_TOKEN_MAX];
    memset(secret, 0, sizeof secret);
    if (!id_ok(rq, "sbx", sandbox_id, "sandbox") || api_idempotency_key(rq, &idem) < 0)
        return;
    json_object *body = NULL, *resp = NULL;
    if (http_read_json(rq, (size_t)ctl->max_body_client, &body) < 0)
        return;
    static const char *const known[] = { "port", "ttl_seconds", "auth", NULL };
    const char *bad = NULL;
    if (!json_object_is_type(body, json_type_object)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the request body must be a JSON object");
        goto cleanup;
    }
    json_object_object_foreach(body, k, v) {
        (void)v;
        bool ok = false;
        for (int i = 0; known[i]; i++)
            ok = ok || strcmp(k, known[i]) == 0;
        if (!ok)
            bad = k;
    }
    if (bad) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "unknown field \"%.64s\" in a share request", bad);
        goto cleanup;
    }
    int64_t port = 0, ttl = 0;
    json_object *pv = NULL, *tv = NULL;
    if (!json_object_object_get_ex(body, "port", &pv) || !json_object_is_type(pv, json_type_int) ||
        (port = json_object_get_int64(pv)) < 1 || port > 65535) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "port is required: an integer from 1 to 65535");
        goto cleanup;
    }
    if (json_object_object_get_ex(body, "ttl_seconds", &tv) && !json_object_is_type(tv, json_type_null)) {
        if (!json_object_is_type(tv, json_type_int) || (ttl = json_object_get_int64(tv)) < 10 ||
            ttl > ctl->max_route_ttl) {
            http_reply_error(rq, API_INVALID_ARGUMENT, "ttl_seconds must be an integer from 10 to %lld",
                             (long long)ctl->max_route_ttl);
            goto cleanup;
        }
    }
    const char *auth = jsonx_get_str(body, "auth");
    json_object *av = NULL;
    if (json_object_object_get_ex(body, "auth", &av) && av &&
        (!auth || (strcmp(auth, "token") != 0 && strcmp(auth, "public") != 0))) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "auth must be token or public");
        goto cleanup;
    }
    bool token_auth = !auth || strcmp(auth, "token") == 0;
    /* The route's name is its unguessable address; its id names it in the
     * API. The access token is shown once, only its hash is kept. */
    char route_id[SBX_ID_MAX], name_id[SBX_ID_MAX], hash[TOKEN_HASH_HEX];
    ids_new("rt", route_id);
    ids_new("r", name_id);
    const char *name = strchr(name_id, '_') ? strchr(name_id, '_') + 1 : name_id;
    if (token_auth) {
        token_generate_route(secret);
        token_hash_hex(secret, hash);
    }
    char reqhash[65], scope_key[160], canon[96];
    snprintf(scope_key, sizeof scope_key, "share %s", sandbox_id);
    snprintf(canon, sizeof canon, "%lld %lld %s", (long long)port, (long long)ttl, token_auth ? "token" : "public");
    request_hash(scope_key, canon, reqhash);
    share_req_t sr = { .scope = auth_scope(rq), .sandbox_id = sandbox_id, .port = (int)port, .token_auth = token_auth,
                       .secret_hash = token_auth ? hash : NULL, .ttl_seconds = ttl, .route_id = route_id,
                       .route_name = name, .idempotency_key = idem, .request_hash = reqhash,
                       .created_by = rq->auth.token_id };
    api_error_t err;
    if (store_route_share(rq->db, &ctl->lim, &sr, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        goto cleanup;
    }
    json_object *route = jsonx_get_obj(resp, "route");
    if (route) {
        route_add_url(ctl, route);
        /* Shown once: a replayed request (same idempotency key) made no new
         * token, so it gets none. */
        if (token_auth && strcmp(jsonx_get_str(route, "id") ? jsonx_get_str(route, "id") : "", route_id) == 0)
            jsonx_add_str(resp, "access_token", secret);
    }
    controller_kick_reconcile(ctl);
    http_reply_json(rq, 202, resp);
cleanup:
    sodium_memzero(secret, sizeof secret);
    if (body)
        json_object_put(body);
}

void api_routes_list(req_t *rq, const char *sandbox_id)
{
    if (!id_ok(rq, "sbx", sandbox_id, "sandbox"))
        return;
    const char *all = http_query(rq, "all");
    json_object *resp = NULL;
    api_error_t err;
    if (store_routes_list(rq->db, auth_scope(rq), sandbox_id, all && (strcmp(all, "true") == 0 || strcmp(all, "1") == 0),
                          &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *routes = jsonx_get_arr(resp, "routes");
    for (size_t i = 0; routes && i < json_object_array_length(routes); i++)
        route_add_url(rq->ctl, json_object_array_get_idx(routes, i));
    http_reply_json(rq, 200, resp);
}

void api_route_unshare(req_t *rq, const char *sandbox_id, const char *route_id)
{
    if (!id_ok(rq, "sbx", sandbox_id, "sandbox") || !id_ok(rq, "rt", route_id, "route"))
        return;
    json_object *resp = NULL;
    api_error_t err;
    if (store_route_unshare(rq->db, &rq->ctl->lim, auth_scope(rq), sandbox_id, route_id, rq->auth.token_id, &resp,
                            &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 202, resp);
}

void api_operation_get(req_t *rq, const char *id)
{
    int wait = 0;
    if (!id_ok(rq, "op", id, "operation") || http_wait_param(rq, &wait) < 0)
        return;
    json_object *resp = NULL;
    api_error_t err;
    bool terminal = false;
    if (store_operation_get(rq->db, auth_scope(rq), id, &resp, &terminal, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (terminal || wait == 0) {
        http_reply_json(rq, 200, resp);
        return;
    }
    json_object_put(resp);
    http_park(rq, PARK_OPERATION, id, wait);
}

/* The offset query parameter: a byte offset, 0 when absent. */
static int output_offset_param(req_t *rq, int64_t *ret)
{
    const char *s = http_query(rq, "offset");
    *ret = 0;
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > SBX_OUTPUT_OFFSET_MAX) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "offset must be a byte offset (a whole number from 0)");
        return SBX_EINVAL;
    }
    *ret = v;
    return 0;
}

void api_operation_output(req_t *rq, const char *id)
{
    int wait = 0;
    int64_t offset = 0;
    if (!id_ok(rq, "op", id, "operation") || http_wait_param(rq, &wait) < 0 || output_offset_param(rq, &offset) < 0)
        return;
    json_object *resp = NULL;
    api_error_t err;
    bool ready = false;
    if (store_output_read(rq->db, auth_scope(rq), id, offset, SBX_OUTPUT_READ_MAX_BYTES, &resp, &ready, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (ready || wait == 0) {
        http_reply_json(rq, 200, resp);
        return;
    }
    json_object_put(resp);
    rq->park_cursor = offset;
    http_park(rq, PARK_OUTPUT, id, wait);
}

void api_operation_cancel(req_t *rq, const char *id)
{
    if (!id_ok(rq, "op", id, "operation"))
        return;
    json_object *resp = NULL;
    api_error_t err;
    if (store_operation_cancel(rq->db, auth_scope(rq), id, &resp, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    log_info("controller", "operation %s cancel asked by %s", id, rq->auth.token_id);
    controller_wake_waiters(rq->ctl);
    controller_kick_reconcile(rq->ctl);
    http_reply_json(rq, 202, resp);
}

void api_output_resume(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    bool ready = false;
    if (store_output_read(rq->db, auth_scope(rq), rq->park_id, rq->park_cursor, SBX_OUTPUT_READ_MAX_BYTES, &resp,
                          &ready, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}

void api_operation_resume(req_t *rq)
{
    json_object *resp = NULL;
    api_error_t err;
    if (store_operation_get(rq->db, auth_scope(rq), rq->park_id, &resp, NULL, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    http_reply_json(rq, 200, resp);
}
