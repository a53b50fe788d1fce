/* The JSON codec of the external driver protocol 1 (docs/runtime-drivers.md)
 * and the decoder of the frames a driver sends on exec streams. Pure: no
 * I/O, no locks; tests/unit/test_extdrv.c covers it. */
#include "extdrv.h"
#include "jsonx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *extdrv_request_line(int64_t id, const char *method, json_object *params, size_t *ret_len)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "jsonrpc", "2.0");
    jsonx_add_int(o, "id", id);
    jsonx_add_str(o, "method", method);
    jsonx_add(o, "params", params ? json_object_get(params) : json_object_new_object());
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(s);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, s, n);
        line[n] = '\n';
        line[n + 1] = '\0';
        *ret_len = n + 1;
    }
    json_object_put(o);
    return line;
}

void extdrv_msg_release(extdrv_msg_t *m)
{
    if (!m)
        return;
    if (m->result)
        json_object_put(m->result);
    m->result = NULL;
}

/* Maps a JSON-RPC error object to an API error. */
static void extdrv_error_map(const char *name, json_object *e, api_error_t *ret)
{
    const char *msg = jsonx_get_str(e, "message");
    const char *code = jsonx_get_str(jsonx_get_obj(e, "data"), "code");
    int c = code ? api_code_parse(code) : -1;
    if (!msg)
        msg = "no message";
    if (c < 0)
        api_error_set(ret, API_RUNTIME_ERROR, "driver %s: %.*s", name, SBX_DRIVER_MESSAGE_MAX, msg);
    else
        api_error_set(ret, (api_code_t)c, "%.*s", SBX_DRIVER_MESSAGE_MAX, msg);
}

int extdrv_msg_parse(const char *name, const char *line, size_t len, extdrv_msg_t *ret, api_error_t *err)
{
    json_object *o = NULL, *v = NULL;
    api_error_t perr;
    memset(ret, 0, sizeof *ret);
    if (jsonx_parse(line, len, &o, &perr) < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s sent a line that is not JSON: %.200s", name,
                             perr.message);
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s sent a line that is not a JSON object", name);
    }
    if (!json_object_object_get_ex(o, "id", &v) || json_object_is_type(v, json_type_null)) {
        json_object_put(o); /* a notification: ignored */
        return 0;
    }
    int64_t id = 0;
    if (!jsonx_get_int(o, "id", &id) || id <= 0) {
        json_object_put(o);
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s sent a response with a bad id", name);
    }
    json_object *res = NULL, *e = jsonx_get_obj(o, "error");
    bool has_res = json_object_object_get_ex(o, "result", &res);
    if (!e && !has_res) {
        json_object_put(o);
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s sent a response with neither result nor error",
                             name);
    }
    ret->id = id;
    if (e) {
        ret->is_error = true;
        extdrv_error_map(name, e, &ret->err);
    } else {
        ret->result = res ? json_object_get(res) : json_object_new_object();
    }
    json_object_put(o);
    return 0;
}

bool extdrv_ref_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SBX_DRIVER_REF_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

int extdrv_hello_parse(json_object *result, extdrv_hello_t *ret, api_error_t *err)
{
    extdrv_hello_t h;
    memset(&h, 0, sizeof h);
    const char *name = jsonx_get_str(result, "name"), *version = jsonx_get_str(result, "version");
    if (!name || !*name || strlen(name) >= sizeof h.name)
        return api_error_set(err, API_RUNTIME_ERROR, "the driver's hello has no name (1..63 characters)");
    snprintf(h.name, sizeof h.name, "%s", name);
    snprintf(h.version, sizeof h.version, "%s", version ? version : "");
    if (!jsonx_get_int(result, "protocol", &h.protocol))
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s's hello has no protocol", h.name);
    if (h.protocol != EXTDRV_PROTOCOL)
        return api_error_set(err, API_RUNTIME_ERROR, "driver %s speaks protocol %lld, the worker %d", h.name,
                             (long long)h.protocol, EXTDRV_PROTOCOL);
    json_object *classes = jsonx_get_arr(result, "classes");
    for (size_t i = 0; classes && i < json_object_array_length(classes); i++) {
        json_object *c = json_object_array_get_idx(classes, i);
        isolation_t cls;
        if (isolation_parse(jsonx_get_str(c, "class"), &cls) < 0)
            continue; /* a class this worker does not know */
        h.offers[cls] = true;
        const char *probe = jsonx_get_str(c, "probe");
        snprintf(h.probe[cls], sizeof h.probe[cls], "%s", probe ? probe : "");
        json_object *modes = jsonx_get_arr(c, "network_modes");
        for (size_t j = 0; modes && j < json_object_array_length(modes); j++) {
            net_mode_t m;
            if (net_mode_parse(json_object_get_string(json_object_array_get_idx(modes, j)), &m) == 0)
                h.net_modes[cls] |= 1u << m;
        }
    }
    json_object *caps = jsonx_get_arr(result, "capabilities");
    for (size_t i = 0; caps && i < json_object_array_length(caps); i++) {
        const char *c = json_object_get_string(json_object_array_get_idx(caps, i));
        if (!c)
            continue;
        h.cap_files |= strcmp(c, "files") == 0;
        h.cap_shell |= strcmp(c, "shell") == 0;
        h.cap_dial |= strcmp(c, "dial") == 0;
        h.cap_images |= strcmp(c, "images") == 0;
        h.cap_disks |= strcmp(c, "disks") == 0;
        h.cap_snapshots |= strcmp(c, "snapshots") == 0;
        h.cap_nic |= strcmp(c, "nic") == 0;
        h.cap_snapshot_copy |= strcmp(c, "snapshot_copy") == 0;
    }
    *ret = h;
    return 0;
}

int extdrv_object_parse(json_object *o, runtime_object_t *ret, json_object **ret_labels, api_error_t *err)
{
    const char *ref = jsonx_get_str(o, "ref"), *sbx = jsonx_get_str(o, "sandbox_id");
    const char *tenant = jsonx_get_str(o, "tenant"), *state = jsonx_get_str(o, "state");
    json_object *labels = jsonx_get_obj(o, "labels");
    if (!extdrv_ref_valid(ref))
        return api_error_set(err, API_RUNTIME_ERROR, "a sandbox object of the driver has a bad ref");
    if (!sbx || !*sbx || strlen(sbx) >= SBX_ID_MAX)
        return api_error_set(err, API_RUNTIME_ERROR, "sandbox object %s of the driver has a bad sandbox_id", ref);
    memset(ret, 0, sizeof *ret);
    snprintf(ret->ref, sizeof ret->ref, EXTDRV_REF_PREFIX "%s", ref);
    snprintf(ret->sandbox_id, sizeof ret->sandbox_id, "%s", sbx);
    snprintf(ret->tenant, sizeof ret->tenant, "%s", tenant ? tenant : "");
    snprintf(ret->state, sizeof ret->state, "%s", state ? state : "unknown");
    json_object *ex = jsonx_get_obj(o, "exit");
    if (ex && strcmp(ret->state, "running") != 0) {
        int64_t code = -1;
        const char *fin = jsonx_get_str(ex, "finished_at"), *e = jsonx_get_str(ex, "error");
        ret->exit.known = true;
        snprintf(ret->exit.state, sizeof ret->exit.state, "%s", ret->state);
        ret->exit.exit_code = jsonx_get_int(ex, "exit_code", &code) && code >= -1 && code <= 255 ? (int)code : -1;
        jsonx_get_bool(ex, "oom_killed", &ret->exit.oom_killed);
        snprintf(ret->exit.finished_at, sizeof ret->exit.finished_at, "%s", fin ? fin : "");
        snprintf(ret->exit.error, sizeof ret->exit.error, "%s", e ? e : "");
    }
    if (ret_labels)
        *ret_labels = labels;
    return 0;
}

static json_object *extdrv_kv_object(const kv_list_t *kv)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < kv->n; i++)
        jsonx_add_str(o, kv->items[i].key, kv->items[i].value);
    return o;
}

json_object *extdrv_create_params(const runtime_create_req_t *req)
{
    const sandbox_spec_t *s = req->spec;
    json_object *p = json_object_new_object(), *labels = extdrv_kv_object(&s->labels);
    char disk[32];
    jsonx_add_str(p, "sandbox_id", req->sandbox_id);
    jsonx_add_str(p, "tenant", req->tenant ? req->tenant : "");
    jsonx_add_str(p, "class", isolation_name(req->isolation));
    jsonx_add_str(p, "image", s->image);
    if (s->from && *s->from)
        jsonx_add_str(p, "from", s->from);
    if (req->image_of_snapshot) /* a tenant's files: a disk of this sandbox alone */
        jsonx_add_bool(p, "image_private", true);
    jsonx_add_int(p, "cpu_millis", s->cpu_millis);
    jsonx_add_int(p, "memory_mib", s->memory_mib);
    jsonx_add_int(p, "disk_mib", s->disk_mib);
    jsonx_add_str(p, "network", net_mode_name(s->network));
    jsonx_add_str(p, "egress_allow", req->egress_allow ? req->egress_allow : "");
    jsonx_add_bool(p, "read_only_root", s->read_only_root);
    jsonx_add_bool(p, "hardened", s->hardened);
    jsonx_add(p, "env", extdrv_kv_object(&s->env));
    /* the owner labels last, so a user label cannot take their place */
    jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SANDBOX);
    jsonx_add_str(labels, RUNTIME_LABEL_SANDBOX, req->sandbox_id);
    jsonx_add_str(labels, RUNTIME_LABEL_TENANT, req->tenant ? req->tenant : "");
    if (req->cluster_id && *req->cluster_id)
        jsonx_add_str(labels, RUNTIME_LABEL_CLUSTER, req->cluster_id);
    if (req->worker_name && *req->worker_name)
        jsonx_add_str(labels, RUNTIME_LABEL_WORKER, req->worker_name);
    if (s->disk_mib > 0) {
        snprintf(disk, sizeof disk, "%lld", (long long)s->disk_mib);
        jsonx_add_str(labels, RUNTIME_LABEL_DISK_MIB, disk);
    }
    jsonx_add(p, "labels", labels);
    if (req->nic) { /* the tap the worker's egress filter takes (capability nic) */
        json_object *nic = json_object_new_object();
        jsonx_add_str(nic, "tap", req->nic->tap);
        jsonx_add_str(nic, "host", req->nic->host);
        jsonx_add_str(nic, "guest", req->nic->guest);
        jsonx_add_int(nic, "prefix", req->nic->prefix);
        jsonx_add(p, "nic", nic);
    }
    if (req->ndisks > 0) {
        json_object *disks = json_object_new_array();
        for (size_t i = 0; i < req->ndisks; i++) {
            json_object *d = json_object_new_object();
            jsonx_add_str(d, "path", req->disks[i].path);
            jsonx_add_str(d, "target", req->disks[i].target);
            jsonx_add_bool(d, "read_only", req->disks[i].read_only);
            json_object_array_add(disks, d);
        }
        jsonx_add(p, "disks", disks);
    }
    return p;
}

json_object *extdrv_exec_params(const char *ref, const exec_spec_t *spec, size_t max_output, const char *token)
{
    json_object *p = json_object_new_object(), *argv = json_object_new_array();
    for (size_t i = 0; i < spec->argc; i++)
        json_object_array_add(argv, json_object_new_string(spec->argv[i]));
    jsonx_add_str(p, "ref", ref);
    jsonx_add(p, "argv", argv);
    jsonx_add(p, "env", extdrv_kv_object(&spec->env));
    if (spec->cwd)
        jsonx_add_str(p, "cwd", spec->cwd);
    jsonx_add_int(p, "timeout_seconds", spec->timeout_seconds);
    jsonx_add_int(p, "max_output_bytes", (int64_t)max_output);
    jsonx_add_str(p, "stream", token);
    return p;
}

int extdrv_exec_result_parse(json_object *result, runtime_exec_result_t *ret, api_error_t *err)
{
    int64_t code = 0, sig = 0, dur = 0;
    if (!jsonx_get_int(result, "exit_code", &code) || code < -1 || code > 255)
        return api_error_set(err, API_RUNTIME_ERROR, "the driver's exec result has no exit_code (-1..255)");
    if (jsonx_get_int(result, "signal", &sig) && (sig < 0 || sig > 64))
        return api_error_set(err, API_RUNTIME_ERROR, "the driver's exec result has a bad signal");
    jsonx_get_int(result, "duration_ms", &dur);
    ret->exit_code = (int)code;
    ret->signal = (int)sig;
    ret->duration_ms = dur >= 0 ? dur : 0;
    jsonx_get_bool(result, "timed_out", &ret->timed_out);
    bool cancelled = false;
    jsonx_get_bool(result, "cancelled", &cancelled);
    ret->cancelled = ret->cancelled || cancelled;
    return 0;
}

int extdrv_stat_parse(json_object *result, runtime_files_stat_t *ret, api_error_t *err)
{
    static const char *const types[] = { "file", "dir", "symlink", "other" };
    json_object *st = jsonx_get_obj(result, "stat");
    const char *name = jsonx_get_str(st, "name"), *type = jsonx_get_str(st, "type");
    const char *mtime = jsonx_get_str(st, "mtime"), *link = jsonx_get_str(st, "link_target");
    int64_t size = 0, mode = 0;
    memset(ret, 0, sizeof *ret);
    if (!st || !name || !type || !jsonx_get_int(st, "size", &size) || size < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "the driver's files_get answer has no valid stat");
    jsonx_get_int(st, "mode", &mode);
    ret->type = types[3];
    for (size_t i = 0; i < 3; i++)
        if (strcmp(type, types[i]) == 0)
            ret->type = types[i];
    snprintf(ret->name, sizeof ret->name, "%s", name);
    snprintf(ret->mtime, sizeof ret->mtime, "%s", mtime ? mtime : "");
    snprintf(ret->link_target, sizeof ret->link_target, "%s", link ? link : "");
    ret->size = size;
    ret->mode = (unsigned)mode & 07777u;
    return 0;
}

void extdrv_frames_init(extdrv_frames_t *d) { memset(d, 0, sizeof *d); }

int extdrv_frames_next(extdrv_frames_t *d, const void *data, size_t n, size_t *ret_used, extdrv_frame_t *ret)
{
    const unsigned char *p = data;
    size_t used = 0;
    if (d->ready) {
        d->len = 0;
        d->ready = false;
    }
    for (;;) {
        size_t want = SHELLFRAME_HEADER_BYTES;
        if (d->len >= SHELLFRAME_HEADER_BYTES) {
            uint32_t len = (uint32_t)d->buf[1] << 24 | (uint32_t)d->buf[2] << 16 | (uint32_t)d->buf[3] << 8 |
                           d->buf[4];
            int t = d->buf[0];
            bool ok = (t == SHELLFRAME_DATA || t == EXTDRV_FRAME_STDERR) ? len >= 1 && len <= SHELLFRAME_PAYLOAD_MAX
                      : t == SHELLFRAME_EXIT                           ? len == 4
                                                                       : false;
            if (!ok) {
                *ret_used = used;
                return SBX_EINVAL;
            }
            want = SHELLFRAME_HEADER_BYTES + len;
            if (d->len == want) {
                memset(ret, 0, sizeof *ret);
                ret->type = t;
                ret->data = d->buf + SHELLFRAME_HEADER_BYTES;
                ret->len = len;
                if (t == SHELLFRAME_EXIT)
                    ret->exit_code = (int32_t)((uint32_t)ret->data[0] << 24 | (uint32_t)ret->data[1] << 16 |
                                               (uint32_t)ret->data[2] << 8 | ret->data[3]);
                d->ready = true;
                *ret_used = used;
                return 1;
            }
        }
        if (used == n) {
            *ret_used = used;
            return 0;
        }
        size_t take = want - d->len;
        if (take > n - used)
            take = n - used;
        memcpy(d->buf + d->len, p + used, take);
        d->len += take;
        used += take;
    }
}
