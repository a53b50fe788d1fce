/* Tenant policy codec and checks. */
#include "policy.h"
#include "imageref.h"
#include "jsonx.h"
#include "limits.h"
#include "netaddr.h"

#include <stddef.h>

#include <stdlib.h>
#include <string.h>

void policy_init(policy_t *p)
{
    memset(p, 0, sizeof *p);
    p->routes = -1;
    p->untrusted_open_network = -1;
    p->auto_pause = -1;
    for (int i = 0; i < 3; i++)
        p->isolation_min[i] = -1;
}

const char *const policy_isolation_rules[3] = { "isolation_trusted", "isolation_untrusted", "isolation_hostile" };

void policy_release(policy_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_images; i++)
        free(p->images[i]);
    free(p->images);
    for (size_t i = 0; i < p->n_registries; i++)
        free(p->registries[i]);
    free(p->registries);
    for (size_t i = 0; i < p->n_egress_allow; i++)
        free(p->egress_allow[i]);
    free(p->egress_allow);
    egress_rules_release(&p->egress);
    policy_init(p);
}

static const struct {
    const char *name;
    size_t off;
    int64_t max;
} policy_nums[] = {
    { "max_cpu_millis", offsetof(policy_t, max_cpu_millis), SBX_CPU_MILLIS_MAX },
    { "max_memory_mib", offsetof(policy_t, max_memory_mib), SBX_MEMORY_MIB_MAX },
    { "max_disk_mib", offsetof(policy_t, max_disk_mib), SBX_DISK_MIB_MAX },
    { "max_ttl_seconds", offsetof(policy_t, max_ttl_seconds), SBX_TTL_SECONDS_MAX },
    { "max_sandboxes", offsetof(policy_t, max_sandboxes), 1000000 },
    { "max_total_cpu_millis", offsetof(policy_t, max_total_cpu_millis), INT64_C(1000000000) },
    { "max_total_memory_mib", offsetof(policy_t, max_total_memory_mib), INT64_C(1000000000) },
    { "exec_output_default_bytes", offsetof(policy_t, exec_output_default_bytes), SBX_EXEC_OUTPUT_CEILING },
    { "exec_output_max_bytes", offsetof(policy_t, exec_output_max_bytes), SBX_EXEC_OUTPUT_CEILING },
    { "max_pool_size", offsetof(policy_t, max_pool_size), SBX_POOL_SIZE_MAX },
    { "max_transfers", offsetof(policy_t, max_transfers), SBX_FILES_STREAMS_MAX },
    { "max_shells", offsetof(policy_t, max_shells), SBX_FILES_STREAMS_MAX },
    { "max_log_streams", offsetof(policy_t, max_log_streams), 1000000 },
    { "max_worker_connections", offsetof(policy_t, max_worker_connections), 1000000 },
    { "max_executors_per_worker", offsetof(policy_t, max_executors_per_worker), SBX_WORKER_EXECUTORS_MAX },
    { "exec_output_tenant_keep_bytes", offsetof(policy_t, exec_output_tenant_keep_bytes), SBX_OUTPUT_TENANT_KEEP_MAX },
    { "max_snapshots", offsetof(policy_t, max_snapshots), 100000 },
    { "max_snapshot_mib", offsetof(policy_t, max_snapshot_mib), INT64_C(16777216) },
    { "max_volumes", offsetof(policy_t, max_volumes), 100000 },
    { "max_volume_mib", offsetof(policy_t, max_volume_mib), INT64_C(16777216) },
};
#define POLICY_NNUMS (sizeof policy_nums / sizeof policy_nums[0])

/* Reads the non-null "images" array into p (p owns what it gets, also on
 * failure); a negative code with err set when it is not a list of names. */
static int policy_images_from_json(json_object *val, policy_t *p, api_error_t *err)
{
    size_t n = json_object_is_type(val, json_type_array) ? json_object_array_length(val) : 0;
    if (!json_object_is_type(val, json_type_array) || n > POLICY_MAX_IMAGES)
        return api_error_set(err, API_INVALID_ARGUMENT, "policy.images must be an array of at most %d names",
                             POLICY_MAX_IMAGES);
    p->images = calloc(n ? n : 1, sizeof *p->images);
    if (!p->images)
        return api_error_set(err, API_INTERNAL, "out of memory");
    p->images_set = true;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(val, i);
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
        size_t l = s ? strlen(s) : 0;
        if (!s || l == 0 || l > SBX_MAX_IMAGE_BYTES || strchr(s, ' ') ||
            (strchr(s, '*') && !(l >= 2 && strcmp(s + l - 2, "/*") == 0 && strchr(s, '*') == s + l - 1)))
            return api_error_set(err, API_INVALID_ARGUMENT,
                                 "policy.images[%zu] must be an image name or a \"prefix/*\" pattern", i);
        p->images[p->n_images] = strdup(s);
        if (!p->images[p->n_images])
            return api_error_set(err, API_INTERNAL, "out of memory");
        p->n_images++;
    }
    return 0;
}

/* Reads the non-null "registries" array into p (p owns what it gets, also
 * on failure); a negative code with err set when it is not a list of
 * registry entries. */
static int policy_registries_from_json(json_object *val, policy_t *p, api_error_t *err)
{
    size_t n = json_object_is_type(val, json_type_array) ? json_object_array_length(val) : 0;
    if (!json_object_is_type(val, json_type_array) || n > POLICY_MAX_REGISTRIES)
        return api_error_set(err, API_INVALID_ARGUMENT, "policy.registries must be an array of at most %d registries",
                             POLICY_MAX_REGISTRIES);
    p->registries = calloc(n ? n : 1, sizeof *p->registries);
    if (!p->registries)
        return api_error_set(err, API_INTERNAL, "out of memory");
    p->registries_set = true;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(val, i);
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
        char why[200];
        if (!s || !imageref_entry_valid(s, why, sizeof why))
            return api_error_set(err, API_INVALID_ARGUMENT, "policy.registries[%zu]: %s", i,
                                 s ? why : "must be a string");
        if (!(p->registries[p->n_registries] = strdup(s)))
            return api_error_set(err, API_INTERNAL, "out of memory");
        p->n_registries++;
    }
    return 0;
}

/* Reads the non-null "egress_allow" array into p, each CIDR in its
 * canonical form (p owns what it gets, also on failure); a negative code
 * with err set naming the first entry that is not a CIDR. */
static int policy_egress_from_json(json_object *val, policy_t *p, api_error_t *err)
{
    size_t n = json_object_is_type(val, json_type_array) ? json_object_array_length(val) : 0;
    if (!json_object_is_type(val, json_type_array) || n > SBX_EGRESS_ALLOW_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "policy.egress_allow must be an array of at most %d CIDRs",
                             SBX_EGRESS_ALLOW_MAX);
    p->egress_allow = calloc(n ? n : 1, sizeof *p->egress_allow);
    if (!p->egress_allow)
        return api_error_set(err, API_INTERNAL, "out of memory");
    p->egress_allow_set = true;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(val, i);
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
        char cidr[NETADDR_CIDR_MAX], why[160];
        bool v6 = false;
        if (!s || netaddr_cidr_parse(s, cidr, &v6, why, sizeof why) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "policy.egress_allow[%zu] (%.80s%s): %s", i,
                                 s ? s : "not a string", s && strlen(s) > 80 ? "…" : "",
                                 s ? why : "must be a CIDR such as 10.1.0.0/16");
        if (!(p->egress_allow[p->n_egress_allow] = strdup(cidr)))
            return api_error_set(err, API_INTERNAL, "out of memory");
        p->n_egress_allow++;
    }
    return 0;
}

/* Reads the non-null "network_modes" array into p; a negative code with err
 * set when it is not an array of mode names. */
static int policy_network_from_json(json_object *val, policy_t *p, api_error_t *err)
{
    if (!json_object_is_type(val, json_type_array))
        return api_error_set(err, API_INVALID_ARGUMENT, "policy.network_modes must be an array");
    p->network_set = true;
    for (size_t i = 0; i < json_object_array_length(val); i++) {
        json_object *e = json_object_array_get_idx(val, i);
        net_mode_t m;
        if (!json_object_is_type(e, json_type_string) || net_mode_parse(json_object_get_string(e), &m) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "policy.network_modes are none, restricted, open");
        p->network_modes |= 1u << m;
    }
    return 0;
}

int policy_from_json(json_object *o, policy_t *ret, api_error_t *err)
{
    policy_t p;
    policy_init(&p);
    policy_init(ret);
    if (!o || !json_object_is_type(o, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "policy must be a JSON object");
    json_object_object_foreach(o, key, val) {
        size_t k;
        for (k = 0; k < POLICY_NNUMS; k++)
            if (strcmp(key, policy_nums[k].name) == 0)
                break;
        if (k < POLICY_NNUMS) {
            if (json_object_is_type(val, json_type_null))
                continue;
            int64_t v = json_object_get_int64(val);
            if (!json_object_is_type(val, json_type_int) || v < 1 || v > policy_nums[k].max) {
                api_error_set(err, API_INVALID_ARGUMENT, "policy.%s must be an integer from 1 to %lld", key,
                              (long long)policy_nums[k].max);
                goto fail;
            }
            *(int64_t *)(void *)((char *)&p + policy_nums[k].off) = v;
        } else if (strcmp(key, "images") == 0) {
            if (json_object_is_type(val, json_type_null))
                continue;
            if (policy_images_from_json(val, &p, err) < 0)
                goto fail;
        } else if (strcmp(key, "registries") == 0) {
            if (json_object_is_type(val, json_type_null))
                continue;
            if (policy_registries_from_json(val, &p, err) < 0)
                goto fail;
        } else if (strcmp(key, "egress_allow") == 0) {
            if (json_object_is_type(val, json_type_null))
                continue;
            if (policy_egress_from_json(val, &p, err) < 0)
                goto fail;
        } else if (strcmp(key, "egress") == 0) {
            egress_rules_release(&p.egress);
            if (egress_rules_from_json(val, "policy.egress", &p.egress, err) < 0)
                goto fail;
        } else if (strcmp(key, "network_modes") == 0) {
            if (json_object_is_type(val, json_type_null))
                continue;
            if (policy_network_from_json(val, &p, err) < 0)
                goto fail;
        } else if (strcmp(key, "routes") == 0 || strcmp(key, "untrusted_open_network") == 0 ||
                   strcmp(key, "auto_pause") == 0) {
            if (json_object_is_type(val, json_type_null))
                continue;
            if (!json_object_is_type(val, json_type_boolean)) {
                api_error_set(err, API_INVALID_ARGUMENT, "policy.%s must be true or false", key);
                goto fail;
            }
            *(key[0] == 'r' ? &p.routes : key[0] == 'a' ? &p.auto_pause : &p.untrusted_open_network) =
                json_object_get_boolean(val) ? 1 : 0;
        } else if (strncmp(key, "isolation_", 10) == 0) {
            int lvl = -1;
            for (int i = 0; i < 3; i++)
                if (strcmp(key, policy_isolation_rules[i]) == 0)
                    lvl = i;
            if (lvl < 0) {
                api_error_set(err, API_INVALID_ARGUMENT, "unknown field \"%.64s\" in the policy", key);
                goto fail;
            }
            if (json_object_is_type(val, json_type_null))
                continue;
            isolation_t c;
            if (!json_object_is_type(val, json_type_string) || isolation_parse(json_object_get_string(val), &c) < 0) {
                api_error_set(err, API_INVALID_ARGUMENT, "policy.%s must be one of container, gvisor, microvm", key);
                goto fail;
            }
            p.isolation_min[lvl] = (int)c;
        } else {
            api_error_set(err, API_INVALID_ARGUMENT, "unknown field \"%.64s\" in the policy", key);
            goto fail;
        }
    }
    if (p.exec_output_default_bytes && p.exec_output_max_bytes &&
        p.exec_output_default_bytes > p.exec_output_max_bytes) {
        api_error_set(err, API_INVALID_ARGUMENT, "policy.exec_output_default_bytes is above exec_output_max_bytes");
        goto fail;
    }
    *ret = p;
    return 0;
fail:
    policy_release(&p);
    return SBX_EINVAL;
}

json_object *policy_to_json(const policy_t *p)
{
    json_object *o = json_object_new_object();
    for (size_t k = 0; k < POLICY_NNUMS; k++) {
        int64_t v = *(const int64_t *)(const void *)((const char *)p + policy_nums[k].off);
        if (v)
            jsonx_add_int(o, policy_nums[k].name, v);
    }
    if (p->images_set) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < p->n_images; i++)
            json_object_array_add(a, json_object_new_string(p->images[i]));
        jsonx_add(o, "images", a);
    }
    if (p->registries_set) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < p->n_registries; i++)
            json_object_array_add(a, json_object_new_string(p->registries[i]));
        jsonx_add(o, "registries", a);
    }
    if (p->egress_allow_set) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < p->n_egress_allow; i++)
            json_object_array_add(a, json_object_new_string(p->egress_allow[i]));
        jsonx_add(o, "egress_allow", a);
    }
    if (p->egress.set)
        jsonx_add(o, "egress", egress_rules_to_json(&p->egress));
    if (p->network_set) {
        json_object *a = json_object_new_array();
        for (int m = NET_NONE; m <= NET_OPEN; m++)
            if (p->network_modes & (1u << m))
                json_object_array_add(a, json_object_new_string(net_mode_name((net_mode_t)m)));
        jsonx_add(o, "network_modes", a);
    }
    if (p->routes >= 0)
        jsonx_add_bool(o, "routes", p->routes == 1);
    for (int i = 0; i < 3; i++)
        if (p->isolation_min[i] >= 0)
            jsonx_add_str(o, policy_isolation_rules[i], isolation_name((isolation_t)p->isolation_min[i]));
    if (p->untrusted_open_network >= 0)
        jsonx_add_bool(o, "untrusted_open_network", p->untrusted_open_network == 1);
    if (p->auto_pause >= 0)
        jsonx_add_bool(o, "auto_pause", p->auto_pause == 1);
    return o;
}

bool policy_image_allowed(const policy_t *p, const char *image)
{
    if (!p->images_set)
        return true;
    for (size_t i = 0; i < p->n_images; i++) {
        const char *pat = p->images[i];
        size_t l = strlen(pat);
        if (l >= 2 && strcmp(pat + l - 2, "/*") == 0) {
            /* A "prefix/" star pattern: anything below prefix/. */
            if (strncmp(image, pat, l - 1) == 0 && image[l - 1] != '\0')
                return true;
        } else if (strcmp(image, pat) == 0) {
            return true;
        }
    }
    return false;
}

bool policy_registry_allowed(const policy_t *p, const char *registry)
{
    if (!p->registries_set)
        return true;
    for (size_t i = 0; i < p->n_registries; i++)
        if (imageref_entry_match(p->registries[i], registry) > 0)
            return true;
    return false;
}

bool policy_network_allowed(const policy_t *p, net_mode_t m)
{
    return !p->network_set || (p->network_modes & (1u << m)) != 0;
}

int64_t policy_tighter(int64_t server, int64_t tenant)
{
    if (tenant <= 0)
        return server;
    if (server <= 0)
        return tenant;
    return tenant < server ? tenant : server;
}

int policy_check_limit(const char *field, int64_t asked, const char *rule, int64_t server, int64_t tenant,
                       api_error_t *err)
{
    if (asked <= policy_tighter(server, tenant))
        return 0;
    if (tenant > 0 && tenant <= server)
        return api_error_set(err, API_POLICY_DENIED, "%s %lld is over the tenant policy %s = %lld", field,
                             (long long)asked, rule, (long long)tenant);
    return api_error_set(err, API_POLICY_DENIED, "%s %lld is over the server ceiling %s = %lld", field,
                         (long long)asked, rule, (long long)server);
}
