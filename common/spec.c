/* Strict codecs for the sandbox spec and the exec request. */
#include "spec.h"
#include "utf8.h"
#include "b64.h"
#include "jsonx.h"
#include "limits.h"
#include "ids.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *net_names[] = { "none", "restricted", "open" };
static const char *iso_names[] = { "container", "gvisor", "microvm" };

const char *net_mode_name(net_mode_t m) { return (unsigned)m < 3 ? net_names[m] : "none"; }
const char *isolation_name(isolation_t c) { return (unsigned)c < 3 ? iso_names[c] : "container"; }

int net_mode_parse(const char *s, net_mode_t *ret)
{
    for (int i = 0; s && i < 3; i++)
        if (strcmp(s, net_names[i]) == 0) {
            *ret = (net_mode_t)i;
            return 0;
        }
    return SBX_EINVAL;
}

const char *net_offer_name(int i) { return i == NET_OFFER_FILTERED ? "filtered" : net_mode_name((net_mode_t)i); }

int net_offer_parse(const char *s, int *ret)
{
    net_mode_t m;
    if (s && strcmp(s, "filtered") == 0) {
        *ret = NET_OFFER_FILTERED;
        return 0;
    }
    if (net_mode_parse(s, &m) < 0)
        return SBX_EINVAL;
    *ret = (int)m;
    return 0;
}

int isolation_parse(const char *s, isolation_t *ret)
{
    for (int i = 0; s && i < 3; i++)
        if (strcmp(s, iso_names[i]) == 0) {
            *ret = (isolation_t)i;
            return 0;
        }
    return SBX_EINVAL;
}

static bool str_has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

static bool env_key_ok(const char *k)
{
    if (!*k || !(isalpha((unsigned char)*k) || *k == '_'))
        return false;
    for (; *k; k++)
        if (!(isalnum((unsigned char)*k) || *k == '_'))
            return false;
    return true;
}

static bool label_key_ok(const char *k)
{
    if (!*k)
        return false;
    for (; *k; k++)
        if (!(isalnum((unsigned char)*k) || strchr("._/-", *k)))
            return false;
    return true;
}

bool spec_cwd_ok(const char *s, size_t n)
{
    bool ok = s && n >= 1 && n <= SBX_MAX_PATH_BYTES && s[0] == '/' && utf8_valid(s, n);
    for (size_t i = 0; ok && i < n; i++)
        ok = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f;
    return ok;
}

void kv_list_release(kv_list_t *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].key);
        free(l->items[i].value);
    }
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

int kv_list_from_json(json_object *o, const char *field, bool env_keys, size_t max,
                      kv_list_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    if (!o || json_object_is_type(o, json_type_null))
        return 0;
    if (!json_object_is_type(o, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an object of string values", field);
    size_t n = (size_t)json_object_object_length(o);
    if (n > max)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s has %zu entries; at most %zu are allowed", field, n, max);
    if (n == 0)
        return 0;
    ret->items = calloc(n, sizeof *ret->items);
    if (!ret->items)
        return api_error_set(err, API_INTERNAL, "out of memory");
    json_object_object_foreach(o, key, val) {
        size_t kl = strlen(key);
        if (kl == 0 || kl > SBX_MAX_KEY_BYTES || !(env_keys ? env_key_ok(key) : label_key_ok(key))) {
            kv_list_release(ret);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s key \"%.64s\" is not valid (%s)", field, key,
                                 env_keys ? "letters, digits and _, not starting with a digit"
                                          : "letters, digits and . _ / -, at most 128 bytes");
        }
        if (!json_object_is_type(val, json_type_string)) {
            kv_list_release(ret);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.%.64s must be a string", field, key);
        }
        const char *v = json_object_get_string(val);
        if (strlen(v) != (size_t)json_object_get_string_len(val)) {
            kv_list_release(ret);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.%.64s must not contain NUL bytes", field, key);
        }
        if (strlen(v) > SBX_MAX_VALUE_BYTES) {
            kv_list_release(ret);
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.%.64s is longer than %d bytes", field, key,
                                 SBX_MAX_VALUE_BYTES);
        }
        kv_t *kv = &ret->items[ret->n];
        kv->key = strdup(key);
        kv->value = strdup(v);
        ret->n++;
        if (!kv->key || !kv->value) {
            kv_list_release(ret);
            return api_error_set(err, API_INTERNAL, "out of memory");
        }
    }
    return 0;
}

json_object *kv_list_to_json(const kv_list_t *l)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < l->n; i++)
        jsonx_add_str(o, l->items[i].key, l->items[i].value);
    return o;
}

/* Reads an optional integer field within [lo, hi]. */
static int get_ranged_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t def,
                          int64_t *ret, api_error_t *err)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
        *ret = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an integer", key);
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be between %lld and %lld (got %lld)", key,
                             (long long)lo, (long long)hi, (long long)x);
    *ret = x;
    return 0;
}

static int get_opt_string(json_object *o, const char *key, size_t maxlen, char **ret, api_error_t *err)
{
    json_object *v;
    *ret = NULL;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be a string", key);
    const char *s = json_object_get_string(v);
    size_t l = strlen(s);
    if (l == 0 || l > maxlen || str_has_control(s))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be 1 to %zu printable bytes", key, maxlen);
    if ((size_t)json_object_get_string_len(v) != l)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must not contain NUL bytes", key);
    *ret = strdup(s);
    if (!*ret)
        return api_error_set(err, API_INTERNAL, "out of memory");
    return 0;
}

/* Reads the optional boolean o[key] into *ret, left alone when absent or null;
 * refuses another type naming it as prefix + key ("trust." or ""). */
static int get_opt_bool(json_object *o, const char *key, const char *prefix, bool *ret, api_error_t *err)
{
    json_object *b;
    if (!json_object_object_get_ex(o, key, &b) || json_object_is_type(b, json_type_null))
        return 0;
    if (!json_object_is_type(b, json_type_boolean))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s%s must be true or false", prefix, key);
    *ret = json_object_get_boolean(b);
    return 0;
}

static int check_known_fields(json_object *o, const char *const *known, const char *where, api_error_t *err)
{
    json_object_object_foreach(o, key, val) {
        (void)val;
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            if (strcmp(*k, key) == 0)
                ok = true;
        if (!ok)
            return api_error_set(err, API_INVALID_ARGUMENT, "unknown field \"%.64s\" in %s", key, where);
    }
    return 0;
}

/* Refuses a request body that is not an object or has a field not in known
 * (where names the request in the message). */
static int check_request_body(json_object *o, const char *const *known, const char *where, api_error_t *err)
{
    if (!o || !json_object_is_type(o, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "the request body must be a JSON object");
    return check_known_fields(o, known, where, err);
}

bool spec_sandbox_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SBX_SANDBOX_NAME_MAX || strncmp(s, "sbx_", 4) == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
            return false;
    }
    return true;
}

bool spec_snapshot_name_ok(const char *s)
{
    return s && strncmp(s, "snp_", 4) != 0 && strncmp(s, "sbx_", 4) != 0 && strlen(s) <= SBX_SNAPSHOT_NAME_MAX &&
           spec_sandbox_name_ok(s);
}

static int config_argv(json_object *o, const char *key, json_object *out, api_error_t *err)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
    if (!json_object_is_type(v, json_type_array) || n > SPEC_CONFIG_ARGV_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "config.%s must be an array of at most %d strings", key,
                             SPEC_CONFIG_ARGV_MAX);
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
        if (!s || strlen(s) > SPEC_CONFIG_ARG_BYTES || (size_t)json_object_get_string_len(e) != strlen(s)) {
            json_object_put(a);
            return api_error_set(err, API_INVALID_ARGUMENT, "config.%s[%zu] must be a string of at most %d bytes",
                                 key, i, SPEC_CONFIG_ARG_BYTES);
        }
        json_object_array_add(a, json_object_new_string(s));
    }
    jsonx_add(out, key, a);
    return 0;
}

static bool config_user_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || s[0] == '-' || s[0] == ':')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-' && s[i] != ':')
            return false;
    return true;
}

int spec_snapshot_config_from_json(json_object *o, json_object **ret, api_error_t *err)
{
    static const char *const known[] = { "env", "workdir", "user", "cmd", "entrypoint", "expose", NULL };
    *ret = NULL;
    json_object *out = json_object_new_object();
    if (!o || json_object_is_type(o, json_type_null)) {
        *ret = out;
        return 0;
    }
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(out);
        return api_error_set(err, API_INVALID_ARGUMENT, "config must be an object");
    }
    if (check_known_fields(o, known, "config", err) < 0)
        goto fail;
    json_object *v = NULL;
    if (json_object_object_get_ex(o, "env", &v) && !json_object_is_type(v, json_type_null)) {
        kv_list_t env;
        if (kv_list_from_json(v, "config.env", true, SBX_MAX_ENV, &env, err) < 0)
            goto fail;
        jsonx_add(out, "env", kv_list_to_json(&env));
        kv_list_release(&env);
    }
    if (json_object_object_get_ex(o, "workdir", &v) && !json_object_is_type(v, json_type_null)) {
        const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
        if (!s || !spec_cwd_ok(s, (size_t)json_object_get_string_len(v))) {
            api_error_set(err, API_INVALID_ARGUMENT, "config.workdir must be an absolute path of at most %d bytes",
                          SBX_MAX_PATH_BYTES);
            goto fail;
        }
        jsonx_add_str(out, "workdir", s);
    }
    if (json_object_object_get_ex(o, "user", &v) && !json_object_is_type(v, json_type_null)) {
        const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
        if (!s || !config_user_ok(s)) {
            api_error_set(err, API_INVALID_ARGUMENT,
                          "config.user must be a user name or id (and :group), 1 to 64 letters, digits, _, ., - or :");
            goto fail;
        }
        jsonx_add_str(out, "user", s);
    }
    if (config_argv(o, "cmd", out, err) < 0 || config_argv(o, "entrypoint", out, err) < 0)
        goto fail;
    if (json_object_object_get_ex(o, "expose", &v) && !json_object_is_type(v, json_type_null)) {
        size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
        if (!json_object_is_type(v, json_type_array) || n > SPEC_CONFIG_EXPOSE_MAX) {
            api_error_set(err, API_INVALID_ARGUMENT, "config.expose must be an array of at most %d ports",
                          SPEC_CONFIG_EXPOSE_MAX);
            goto fail;
        }
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(v, i);
            int64_t port = json_object_is_type(e, json_type_int) ? json_object_get_int64(e) : 0;
            if (port < 1 || port > 65535) {
                json_object_put(a);
                api_error_set(err, API_INVALID_ARGUMENT, "config.expose[%zu] must be a port from 1 to 65535", i);
                goto fail;
            }
            json_object_array_add(a, json_object_new_int64(port));
        }
        jsonx_add(out, "expose", a);
    }
    *ret = out;
    return 0;
fail:
    json_object_put(out);
    return SBX_EINVAL;
}

bool spec_volume_name_ok(const char *s) { return spec_sandbox_name_ok(s) && strncmp(s, "vol_", 4) != 0; }

bool spec_volume_ref_ok(const char *s) { return ids_valid("vol", s) || spec_volume_name_ok(s); }

bool spec_secret_name_ok(const char *s) { return spec_sandbox_name_ok(s); }

/* "secrets": ["NAME", …], distinct. */
static int secrets_from_json(json_object *a, sandbox_spec_t *s, api_error_t *err)
{
    if (!a)
        return 0;
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) > SPEC_SECRETS_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "secrets must be an array of at most %d secret names",
                             SPEC_SECRETS_MAX);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        const char *n = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
        if (!n || !spec_secret_name_ok(n))
            return api_error_set(err, API_INVALID_ARGUMENT, "secrets[%zu] is not a secret name", i);
        for (size_t j = 0; j < s->nsecrets; j++)
            if (strcmp(s->secrets[j], n) == 0)
                return api_error_set(err, API_INVALID_ARGUMENT, "secrets[%zu] (%s) is named twice", i, n);
        if (!(s->secrets[s->nsecrets] = strdup(n)))
            return api_error_set(err, API_INTERNAL, "out of memory");
        s->nsecrets++;
    }
    return 0;
}

bool spec_volume_path_ok(const char *s, char *why, size_t whylen)
{
    static const char *const kernel[] = { "/proc", "/sys", "/dev", NULL };
    const char *reason = NULL;
    size_t n = strlen(s);
    if (n < 2 || s[0] != '/' || n > SPEC_VOLUME_PATH_MAX || !spec_cwd_ok(s, n))
        reason = "must be an absolute path of 2 to 256 printable bytes, not /";
    else if (s[n - 1] == '/')
        reason = "must not end with /";
    for (const char *p = s; !reason && *p;) {
        p++; /* past the / */
        size_t c = strcspn(p, "/");
        if (c == 0 || (c == 1 && p[0] == '.') || (c == 2 && p[0] == '.' && p[1] == '.'))
            reason = "must not have an empty, . or .. component";
        p += c;
    }
    for (const char *const *k = kernel; !reason && *k; k++) {
        size_t l = strlen(*k);
        if (strncmp(s, *k, l) == 0 && (s[l] == '\0' || s[l] == '/'))
            reason = "must not be under /proc, /sys or /dev";
    }
    if (reason && why)
        snprintf(why, whylen, "%s", reason);
    return !reason;
}

/* True when one of a and b is the other or below it ("/data" and
 * "/data/x"): two volumes there would hide each other. */
static bool path_nested(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    const char *s = la <= lb ? a : b, *l = la <= lb ? b : a;
    size_t n = la <= lb ? la : lb;
    return strncmp(s, l, n) == 0 && (l[n] == '\0' || l[n] == '/');
}

/* "volumes": [{"volume": REF, "path": "/abs", "read_only": bool,
 * "size_mib": N}], at most SPEC_VOLUMES_MAX, each volume and path once. */
static int volumes_from_json(json_object *a, sandbox_spec_t *s, api_error_t *err)
{
    static const char *const known[] = { "volume", "path", "read_only", "size_mib", NULL };
    if (!a || json_object_is_type(a, json_type_null))
        return 0;
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) > SPEC_VOLUMES_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "volumes must be an array of at most %d entries",
                             SPEC_VOLUMES_MAX);
    size_t n = json_object_array_length(a);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(a, i);
        char where[32];
        snprintf(where, sizeof where, "volumes[%zu]", i);
        if (!json_object_is_type(e, json_type_object))
            return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an object {\"volume\", \"path\"}", where);
        if (check_known_fields(e, known, where, err) < 0)
            return SBX_EINVAL;
        spec_volume_t *v = &s->volumes[s->nvolumes];
        memset(v, 0, sizeof *v);
        s->nvolumes++; /* released with the spec from here on */
        char why[96];
        if (get_opt_string(e, "volume", SBX_SNAPSHOT_NAME_MAX, &v->volume, err) < 0 ||
            get_opt_string(e, "path", SPEC_VOLUME_PATH_MAX, &v->path, err) < 0 ||
            get_opt_bool(e, "read_only", "", &v->read_only, err) < 0 ||
            get_ranged_int(e, "size_mib", 0, SBX_VOLUME_MIB_MAX, 0, &v->size_mib, err) < 0)
            return SBX_EINVAL;
        if (!v->volume || !spec_volume_ref_ok(v->volume))
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.volume must name a volume: its id (vol_...) or its "
                                 "name", where);
        if (!v->path)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.path is required (where the volume appears)", where);
        if (!spec_volume_path_ok(v->path, why, sizeof why))
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.path %s", where, why);
        for (size_t j = 0; j + 1 < s->nvolumes; j++) {
            if (strcmp(s->volumes[j].volume, v->volume) == 0)
                return api_error_set(err, API_INVALID_ARGUMENT, "%s names volume %s a second time", where,
                                     v->volume);
            if (path_nested(s->volumes[j].path, v->path))
                return api_error_set(err, API_INVALID_ARGUMENT, "%s.path %s and volumes[%zu].path %s nest", where,
                                     v->path, j, s->volumes[j].path);
        }
    }
    return 0;
}

bool spec_snapshot_ref_ok(const char *s) { return ids_valid("snp", s) || spec_snapshot_name_ok(s); }

void spec_snapshot_image(const char *snapshot_id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s:%s", SPEC_SNAPSHOT_REPO, snapshot_id);
}

bool spec_image_is_snapshot(const char *image)
{
    if (!image)
        return false;
    /* the name's last path component, without tag or digest */
    size_t end = strcspn(image, "@");
    const char *last = image;
    for (size_t i = 0; i < end; i++)
        if (image[i] == '/')
            last = image + i + 1;
    size_t n = strcspn(last, ":@");
    size_t r = strlen(SPEC_SNAPSHOT_REPO);
    return n == r && strncasecmp(last, SPEC_SNAPSHOT_REPO, r) == 0;
}

static bool tenant_name_ok(const char *s)
{
    if (!*s || strlen(s) > 63 || !isalnum((unsigned char)*s))
        return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' || *s == '_'))
            return false;
    return true;
}

void spec_release(sandbox_spec_t *s)
{
    if (!s)
        return;
    free(s->tenant);
    free(s->image);
    kv_list_release(&s->env);
    kv_list_release(&s->labels);
    kv_list_release(&s->selector);
    free(s->from);
    for (size_t i = 0; i < s->nsecrets; i++)
        free(s->secrets[i]);
    for (size_t i = 0; i < s->nvolumes; i++) {
        free(s->volumes[i].volume);
        free(s->volumes[i].path);
    }
    egress_rules_release(&s->egress);
    memset(s, 0, sizeof *s);
}

int spec_from_json(json_object *o, sandbox_spec_t *ret, api_error_t *err)
{
    return spec_from_json_default(o, NULL, ret, err);
}

int spec_from_json_default(json_object *o, const char *default_image, sandbox_spec_t *ret, api_error_t *err)
{
    static const char *const known[] = { "tenant", "image", "cpu_millis", "memory_mib", "disk_mib",
                                         "ttl_seconds", "network", "trust", "env", "labels", "isolation",
                                         "read_only_root", "hardened", "selector", "from", "auto_pause", "volumes",
                                         "egress", "secrets", NULL };
    static const char *const trust_known[] = { "untrusted_repo", "generated_code", "hostile", NULL };
    sandbox_spec_t s;
    memset(&s, 0, sizeof s);
    memset(ret, 0, sizeof *ret);
    if (check_request_body(o, known, "the sandbox spec", err) < 0)
        return SBX_EINVAL;
    if (get_opt_string(o, "tenant", 63, &s.tenant, err) < 0)
        goto fail;
    if (s.tenant && !tenant_name_ok(s.tenant)) {
        api_error_set(err, API_INVALID_ARGUMENT,
                      "tenant must be 1 to 63 lowercase letters, digits, - or _, starting with a letter or digit");
        goto fail;
    }
    if (get_opt_string(o, "image", SBX_MAX_IMAGE_BYTES, &s.image, err) < 0)
        goto fail;
    if (!s.image && default_image) {
        s.image = strdup(default_image);
        if (!s.image) {
            api_error_set(err, API_INTERNAL, "out of memory");
            goto fail;
        }
    }
    if (!s.image) {
        api_error_set(err, API_INVALID_ARGUMENT, "image is required");
        goto fail;
    }
    if (strchr(s.image, ' ')) {
        api_error_set(err, API_INVALID_ARGUMENT, "image must not contain spaces");
        goto fail;
    }
    if (get_opt_string(o, "from", SBX_SNAPSHOT_NAME_MAX, &s.from, err) < 0)
        goto fail;
    if (s.from && !spec_snapshot_ref_ok(s.from)) {
        api_error_set(err, API_INVALID_ARGUMENT,
                      "from must name a snapshot: its id (snp_...) or its name (1 to %d letters, digits, _, . or -, "
                      "starting with a letter or digit)", SBX_SNAPSHOT_NAME_MAX);
        goto fail;
    }
    if (get_ranged_int(o, "cpu_millis", SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX, SPEC_DEFAULT_CPU_MILLIS,
                       &s.cpu_millis, err) < 0 ||
        get_ranged_int(o, "memory_mib", SBX_MEMORY_MIB_MIN, SBX_MEMORY_MIB_MAX, SPEC_DEFAULT_MEMORY_MIB,
                       &s.memory_mib, err) < 0 ||
        get_ranged_int(o, "disk_mib", SBX_DISK_MIB_MIN, SBX_DISK_MIB_MAX, 0, &s.disk_mib, err) < 0 ||
        get_ranged_int(o, "ttl_seconds", SBX_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX, SPEC_DEFAULT_TTL_SECONDS,
                       &s.ttl_seconds, err) < 0)
        goto fail;

    json_object *v;
    s.network = NET_NONE;
    if (json_object_object_get_ex(o, "network", &v) && !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_string) || net_mode_parse(json_object_get_string(v), &s.network) < 0) {
            api_error_set(err, API_INVALID_ARGUMENT, "network must be one of none, restricted, open");
            goto fail;
        }
    }
    if (json_object_object_get_ex(o, "trust", &v) && !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_object)) {
            api_error_set(err, API_INVALID_ARGUMENT, "trust must be an object");
            goto fail;
        }
        if (check_known_fields(v, trust_known, "trust", err) < 0)
            goto fail;
        bool *dst[] = { &s.untrusted_repo, &s.generated_code, &s.hostile };
        for (int i = 0; i < 3; i++)
            if (get_opt_bool(v, trust_known[i], "trust.", dst[i], err) < 0)
                goto fail;
    }
    if (json_object_object_get_ex(o, "isolation", &v) && !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_string) || isolation_parse(json_object_get_string(v), &s.isolation) < 0) {
            api_error_set(err, API_INVALID_ARGUMENT, "isolation must be one of container, gvisor, microvm");
            goto fail;
        }
        s.has_isolation = true;
    }
    if (get_opt_bool(o, "read_only_root", "", &s.read_only_root, err) < 0 ||
        get_opt_bool(o, "auto_pause", "", &s.auto_pause, err) < 0 ||
        get_opt_bool(o, "hardened", "", &s.hardened, err) < 0)
        goto fail;
    json_object *env = NULL, *labels = NULL, *selector = NULL;
    json_object_object_get_ex(o, "env", &env);
    json_object_object_get_ex(o, "labels", &labels);
    json_object_object_get_ex(o, "selector", &selector);
    if (kv_list_from_json(env, "env", true, SBX_MAX_ENV, &s.env, err) < 0 ||
        kv_list_from_json(labels, "labels", false, SBX_MAX_LABELS, &s.labels, err) < 0 ||
        kv_list_from_json(selector, "selector", false, SBX_MAX_LABELS, &s.selector, err) < 0)
        goto fail;
    json_object *vols = NULL;
    json_object_object_get_ex(o, "volumes", &vols);
    if (volumes_from_json(vols, &s, err) < 0)
        goto fail;
    json_object *eg = NULL;
    json_object_object_get_ex(o, "egress", &eg);
    if (egress_rules_from_json(eg, "egress", &s.egress, err) < 0)
        goto fail;
    if (s.egress.set && s.network != NET_OPEN) {
        api_error_set(err, API_INVALID_ARGUMENT, "egress rules apply to network open, not %s (nothing leaves it)",
                      net_mode_name(s.network));
        goto fail;
    }
    json_object *secs = NULL;
    json_object_object_get_ex(o, "secrets", &secs);
    if (secrets_from_json(secs, &s, err) < 0)
        goto fail;
    if (s.nsecrets > 0 && s.network != NET_OPEN) {
        api_error_set(err, API_INVALID_ARGUMENT, "secrets are added to requests that leave the sandbox: they need "
                      "network open with egress rules, not %s", net_mode_name(s.network));
        goto fail;
    }
    *ret = s;
    return 0;
fail:
    spec_release(&s);
    return SBX_EINVAL;
}

static bool ref_alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* One path component of an image name: [a-z0-9]+ joined by one '.', one
 * '_', "__" or a run of '-' (Docker's reference grammar). */
static bool ref_component_ok(const char *p, size_t n)
{
    if (n == 0 || !ref_alnum_lower(p[0]) || !ref_alnum_lower(p[n - 1]))
        return false;
    size_t i = 0;
    while (i < n) {
        if (ref_alnum_lower(p[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !ref_alnum_lower(p[j]))
            j++;
        size_t run = j - i;
        bool ok = (run == 1 && (p[i] == '.' || p[i] == '_')) || (run == 2 && p[i] == '_' && p[i + 1] == '_');
        if (!ok) {
            ok = true;
            for (size_t k = i; k < j; k++)
                ok = ok && p[k] == '-';
        }
        if (!ok)
            return false;
        i = j;
    }
    return true;
}

/* A registry host: letters, digits, '.', '-', an optional :PORT. */
static bool ref_domain_ok(const char *p, size_t n)
{
    const char *colon = memchr(p, ':', n);
    size_t hn = colon ? (size_t)(colon - p) : n;
    if (hn == 0 || p[0] == '-' || p[0] == '.' || p[hn - 1] == '-' || p[hn - 1] == '.')
        return false;
    for (size_t i = 0; i < hn; i++)
        if (!isalnum((unsigned char)p[i]) && p[i] != '.' && p[i] != '-')
            return false;
    if (colon) {
        size_t pn = n - hn - 1;
        if (pn == 0 || pn > 5)
            return false;
        for (size_t i = hn + 1; i < n; i++)
            if (!isdigit((unsigned char)p[i]))
                return false;
    }
    return true;
}

static bool ref_fail(char *why, size_t whylen, const char *s, const char *reason)
{
    if (why && whylen)
        snprintf(why, whylen, "\"%.80s\" is not an image reference: %s", s, reason);
    return false;
}

bool spec_image_ref_valid(const char *s, char *why, size_t whylen)
{
    if (!s || !*s)
        return ref_fail(why, whylen, s ? s : "", "it is empty");
    size_t len = strlen(s);
    if (len > SBX_MAX_IMAGE_BYTES) {
        if (why && whylen)
            snprintf(why, whylen, "an image reference is at most %d bytes (got %zu)", SBX_MAX_IMAGE_BYTES, len);
        return false;
    }
    const char *at = strchr(s, '@');
    size_t name_end = at ? (size_t)(at - s) : len;
    if (at) {
        const char *d = at + 1, *dc = strchr(d, ':');
        if (!dc || dc == d)
            return ref_fail(why, whylen, s, "a digest is ALGORITHM:HEX");
        for (const char *p = d; p < dc; p++)
            if (!ref_alnum_lower(*p) && *p != '+' && *p != '.' && *p != '_' && *p != '-')
                return ref_fail(why, whylen, s, "a digest is ALGORITHM:HEX");
        size_t hn = strlen(dc + 1);
        if (hn < 32)
            return ref_fail(why, whylen, s, "a digest's hex part has at least 32 digits");
        for (const char *p = dc + 1; *p; p++)
            if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
                return ref_fail(why, whylen, s, "a digest's hex part is lowercase hex");
    }
    /* the tag: a ':' after the last '/' of the name */
    const char *last_slash = NULL, *tag = NULL;
    for (const char *p = s; p < s + name_end; p++)
        if (*p == '/')
            last_slash = p;
    for (const char *p = last_slash ? last_slash + 1 : s; p < s + name_end; p++)
        if (*p == ':') {
            tag = p;
            break;
        }
    size_t repo_end = tag ? (size_t)(tag - s) : name_end;
    if (tag) {
        size_t tn = name_end - (size_t)(tag - s) - 1;
        if (tn == 0 || tn > 128)
            return ref_fail(why, whylen, s, "a tag is 1 to 128 characters");
        for (size_t i = 1; i <= tn; i++) {
            char c = tag[i];
            if (!isalnum((unsigned char)c) && c != '_' && !(i > 1 && (c == '.' || c == '-')))
                return ref_fail(why, whylen, s, "a tag is letters, digits, _ . - (not starting with . or -)");
        }
    }
    if (repo_end == 0)
        return ref_fail(why, whylen, s, "the name is empty");
    size_t start = 0;
    bool first = true;
    while (start <= repo_end) {
        const char *slash = memchr(s + start, '/', repo_end - start);
        size_t end = slash ? (size_t)(slash - s) : repo_end;
        const char *c = s + start;
        size_t n = end - start;
        /* the first of several components may be a registry host */
        bool domain = first && slash &&
                      (memchr(c, '.', n) || memchr(c, ':', n) || (n == 9 && strncmp(c, "localhost", 9) == 0));
        if (domain ? !ref_domain_ok(c, n) : !ref_component_ok(c, n))
            return ref_fail(why, whylen, s,
                            domain ? "the registry is HOST[:PORT]"
                                   : "names are lowercase letters and digits separated by . _ - or /");
        first = false;
        if (!slash)
            break;
        start = end + 1;
    }
    return true;
}

json_object *spec_to_json(const sandbox_spec_t *s)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "tenant", s->tenant);
    jsonx_add_str(o, "image", s->image);
    jsonx_add_int(o, "cpu_millis", s->cpu_millis);
    jsonx_add_int(o, "memory_mib", s->memory_mib);
    if (s->disk_mib > 0)
        jsonx_add_int(o, "disk_mib", s->disk_mib);
    jsonx_add_int(o, "ttl_seconds", s->ttl_seconds);
    jsonx_add_str(o, "network", net_mode_name(s->network));
    json_object *t = json_object_new_object();
    jsonx_add_bool(t, "untrusted_repo", s->untrusted_repo);
    jsonx_add_bool(t, "generated_code", s->generated_code);
    jsonx_add_bool(t, "hostile", s->hostile);
    jsonx_add(o, "trust", t);
    jsonx_add_str(o, "isolation", s->has_isolation ? isolation_name(s->isolation) : NULL);
    jsonx_add_bool(o, "read_only_root", s->read_only_root);
    jsonx_add_bool(o, "hardened", s->hardened);
    jsonx_add(o, "env", kv_list_to_json(&s->env));
    jsonx_add(o, "labels", kv_list_to_json(&s->labels));
    jsonx_add(o, "selector", kv_list_to_json(&s->selector));
    if (s->from)
        jsonx_add_str(o, "from", s->from);
    if (s->auto_pause)
        jsonx_add_bool(o, "auto_pause", true);
    if (s->nvolumes > 0) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < s->nvolumes; i++) {
            json_object *e = json_object_new_object();
            jsonx_add_str(e, "volume", s->volumes[i].volume);
            jsonx_add_str(e, "path", s->volumes[i].path);
            jsonx_add_bool(e, "read_only", s->volumes[i].read_only);
            if (s->volumes[i].size_mib > 0)
                jsonx_add_int(e, "size_mib", s->volumes[i].size_mib);
            json_object_array_add(a, e);
        }
        jsonx_add(o, "volumes", a);
    }
    if (s->egress.set)
        jsonx_add(o, "egress", egress_rules_to_json(&s->egress));
    if (s->nsecrets > 0) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < s->nsecrets; i++)
            json_object_array_add(a, json_object_new_string(s->secrets[i]));
        jsonx_add(o, "secrets", a);
    }
    return o;
}

void exec_spec_release(exec_spec_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->argc; i++)
        free(s->argv[i]);
    free(s->argv);
    kv_list_release(&s->env);
    free(s->cwd);
    free(s->user);
    free(s->stdin_data);
    memset(s, 0, sizeof *s);
}

/* "stdin" or "stdin_b64" of an exec request into s (absent or null: none). */
static int exec_stdin_from_json(json_object *o, exec_spec_t *s, api_error_t *err)
{
    json_object *text = NULL, *b64 = NULL;
    json_object_object_get_ex(o, "stdin", &text);
    json_object_object_get_ex(o, "stdin_b64", &b64);
    if (text && b64)
        return api_error_set(err, API_INVALID_ARGUMENT, "give stdin or stdin_b64, not both");
    json_object *v = text ? text : b64;
    const char *field = text ? "stdin" : "stdin_b64";
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be a string%s", field,
                             b64 ? " of base64" : " (use stdin_b64 for bytes)");
    const char *p = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (b64) {
        int r = b64_decode(p, n, SBX_EXEC_STDIN_INLINE_MAX, &s->stdin_data, &s->stdin_len);
        if (r == SBX_ENOMEM)
            return api_error_set(err, API_INTERNAL, "out of memory");
        if (r == SBX_EINVAL)
            return api_error_set(err, API_INVALID_ARGUMENT, "stdin_b64 is not padded standard base64");
        n = r == SBX_ETOOBIG ? SBX_EXEC_STDIN_INLINE_MAX + 1u : s->stdin_len;
    }
    if (n > SBX_EXEC_STDIN_INLINE_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT,
                             "%s is over the inline limit of %u bytes; larger input needs a file (sandbox cp)",
                             field, SBX_EXEC_STDIN_INLINE_MAX);
    if (!b64) {
        s->stdin_data = malloc(n + 1);
        if (!s->stdin_data)
            return api_error_set(err, API_INTERNAL, "out of memory");
        memcpy(s->stdin_data, p, n);
        s->stdin_data[n] = '\0';
        s->stdin_len = n;
    }
    s->has_stdin = true;
    return 0;
}

int exec_spec_from_json(json_object *o, exec_spec_t *ret, api_error_t *err)
{
    static const char *const known[] = { "argv",          "env",   "cwd", "timeout_seconds", "max_output_bytes",
                                         "stdin",         "stdin_b64", "user", NULL };
    exec_spec_t s;
    memset(&s, 0, sizeof s);
    memset(ret, 0, sizeof *ret);
    if (check_request_body(o, known, "the exec request", err) < 0)
        return SBX_EINVAL;
    json_object *argv;
    if (!json_object_object_get_ex(o, "argv", &argv) || json_object_is_type(argv, json_type_null))
        return api_error_set(err, API_INVALID_ARGUMENT, "argv is required: an array of strings, never a shell string");
    if (!json_object_is_type(argv, json_type_array))
        return api_error_set(err, API_INVALID_ARGUMENT, "argv must be an array of strings, never a shell string");
    size_t n = json_object_array_length(argv);
    if (n == 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "argv must name a command (it is empty)");
    if (n > SBX_MAX_ARGV)
        return api_error_set(err, API_INVALID_ARGUMENT, "argv has %zu entries; at most %d are allowed", n,
                             SBX_MAX_ARGV);
    s.argv = calloc(n + 1, sizeof *s.argv);
    if (!s.argv)
        return api_error_set(err, API_INTERNAL, "out of memory");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(argv, i);
        if (!json_object_is_type(a, json_type_string)) {
            api_error_set(err, API_INVALID_ARGUMENT, "argv[%zu] must be a string", i);
            goto fail;
        }
        size_t l = (size_t)json_object_get_string_len(a);
        if (strlen(json_object_get_string(a)) != l) {
            api_error_set(err, API_INVALID_ARGUMENT, "argv[%zu] must not contain NUL bytes", i);
            goto fail;
        }
        total += l + 1;
        if (total > SBX_MAX_ARGV_BYTES) {
            api_error_set(err, API_INVALID_ARGUMENT, "argv is longer than %u bytes in total", SBX_MAX_ARGV_BYTES);
            goto fail;
        }
        s.argv[i] = strdup(json_object_get_string(a));
        s.argc++;
        if (!s.argv[i]) {
            api_error_set(err, API_INTERNAL, "out of memory");
            goto fail;
        }
    }
    if (s.argv[0][0] == '\0') {
        api_error_set(err, API_INVALID_ARGUMENT, "argv[0] must not be empty");
        goto fail;
    }
    json_object *env = NULL;
    json_object_object_get_ex(o, "env", &env);
    if (kv_list_from_json(env, "env", true, SBX_MAX_ENV, &s.env, err) < 0)
        goto fail;
    if (get_opt_string(o, "cwd", SBX_MAX_PATH_BYTES, &s.cwd, err) < 0)
        goto fail;
    if (s.cwd && s.cwd[0] != '/') {
        api_error_set(err, API_INVALID_ARGUMENT, "cwd must be an absolute path");
        goto fail;
    }
    if (get_opt_string(o, "user", 64, &s.user, err) < 0)
        goto fail;
    if (s.user && !config_user_ok(s.user)) {
        api_error_set(err, API_INVALID_ARGUMENT, "user must be a user name or id and :group, 1 to 64 letters, digits, "
                      "_, ., - or :");
        goto fail;
    }
    if (get_ranged_int(o, "timeout_seconds", 1, SBX_EXEC_TIMEOUT_MAX, EXEC_DEFAULT_TIMEOUT, &s.timeout_seconds,
                       err) < 0 ||
        get_ranged_int(o, "max_output_bytes", 0, SBX_EXEC_OUTPUT_CEILING, 0, &s.max_output_bytes, err) < 0)
        goto fail;
    if (exec_stdin_from_json(o, &s, err) < 0)
        goto fail;
    *ret = s;
    return 0;
fail:
    exec_spec_release(&s);
    return SBX_EINVAL;
}

json_object *exec_spec_to_json(const exec_spec_t *s)
{
    json_object *o = json_object_new_object();
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < s->argc; i++)
        json_object_array_add(a, json_object_new_string(s->argv[i]));
    jsonx_add(o, "argv", a);
    jsonx_add(o, "env", kv_list_to_json(&s->env));
    jsonx_add_str(o, "cwd", s->cwd);
    if (s->user)
        jsonx_add_str(o, "user", s->user);
    jsonx_add_int(o, "timeout_seconds", s->timeout_seconds);
    jsonx_add_int(o, "max_output_bytes", s->max_output_bytes);
    if (s->has_stdin) {
        char *b = b64_encode(s->stdin_data, s->stdin_len);
        jsonx_add(o, "stdin_b64", b ? json_object_new_string(b) : NULL);
        free(b);
    }
    return o;
}

int spec_extend_from_json(json_object *o, int64_t *ret_ttl_seconds, api_error_t *err)
{
    static const char *const known[] = { "ttl_seconds", NULL };
    json_object *v = NULL;
    int64_t ttl = 0;
    if (check_request_body(o, known, "an extend request", err) < 0)
        return SBX_EINVAL;
    if (!json_object_object_get_ex(o, "ttl_seconds", &v) || json_object_is_type(v, json_type_null))
        return api_error_set(err, API_INVALID_ARGUMENT, "ttl_seconds is required: the seconds from now the "
                             "sandbox should live (%d to %d)", SBX_EXTEND_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX);
    if (get_ranged_int(o, "ttl_seconds", SBX_EXTEND_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX, 0, &ttl, err) < 0)
        return SBX_EINVAL;
    *ret_ttl_seconds = ttl;
    return 0;
}
