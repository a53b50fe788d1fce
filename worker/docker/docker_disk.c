/* The Docker backend's disk quotas: whether the storage driver takes
 * StorageOpt size (probed once at open), and otherwise the watch that
 * measures each running sandbox's writable layer (inspect ?size=true,
 * SizeRw) and kills the ones over their disk_mib. */
#include "docker_internal.h"
#include "jsonx.h"
#include "observed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int docker_container_size_rw(docker_runtime_t *rt, const char *id, int64_t *ret, api_error_t *err)
{
    char path[160];
    json_object *o = NULL;
    snprintf(path, sizeof path, "/containers/%s/json?size=true", id);
    int r = docker_get_json(rt, path, DOCKER_DISK_CALL_MS, &o, err);
    if (r < 0)
        return r;
    int64_t size = -1;
    if (!jsonx_get_int(o, "SizeRw", &size) || size < 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "docker reported no SizeRw for container %.12s", id);
    else
        *ret = size;
    json_object_put(o);
    return r;
}

void docker_disk_discover(docker_runtime_t *rt, json_object *info)
{
    const char *driver = jsonx_get_str(info, "Driver");
    char backing[64] = "";
    json_object *st = jsonx_get_arr(info, "DriverStatus");
    for (size_t i = 0; st && i < json_object_array_length(st); i++) {
        json_object *kv = json_object_array_get_idx(st, i);
        const char *k = json_object_get_string(json_object_array_get_idx(kv, 0));
        const char *v = json_object_get_string(json_object_array_get_idx(kv, 1));
        if (k && v && strcmp(k, "Backing Filesystem") == 0)
            snprintf(backing, sizeof backing, " on %.40s", v);
    }
    char msg[320] = "";
    api_error_t perr;
    json_object *body = NULL, *o = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    if (docker_probe_image(rt, &perr) < 0) {
        snprintf(msg, sizeof msg, "%.300s", perr.message);
        goto done;
    }
    body = docker_probe_body(DOCKER_PROBE_IMAGE, "runc", rt->worker_name);
    json_object *so = json_object_new_object();
    jsonx_add_str(so, "size", DOCKER_DISK_PROBE_SIZE);
    jsonx_add(jsonx_get_obj(body, "HostConfig"), "StorageOpt", so);
    if (docker_call(rt, "POST", "/containers/create", body, DOCKER_PROBE_CALL_MS, &rep, &perr) < 0) {
        snprintf(msg, sizeof msg, "%.300s", perr.message);
        goto done;
    }
    o = docker_reply_json(&rep);
    const char *cid = jsonx_get_str(o, "Id");
    if (rep.status == 201 && cid && docker_name_ok(cid, 80)) {
        rt->storage_quota = true;
        docker_container_delete(rt, cid, &perr);
    } else {
        docker_reply_message(&rep, msg, sizeof msg);
    }
done:
    if (rt->storage_quota)
        snprintf(rt->disk_mode, sizeof rt->disk_mode,
                 "storage driver: %.40s%s takes StorageOpt size, so a sandbox cannot write past its disk_mib "
                 "(the watch stays on as well)", driver ? driver : "?", backing);
    else
        snprintf(rt->disk_mode, sizeof rt->disk_mode,
                 "watched: the storage driver %.40s%s does not take StorageOpt size (%.200s); the worker "
                 "measures each sandbox's writable layer and stops it over its disk_mib",
                 driver ? driver : "?", backing, msg[0] ? msg : "no reason given");
    if (body)
        json_object_put(body);
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
}

bool docker_disk_exceeded(docker_runtime_t *rt, json_object *inspect)
{
    int64_t quota = docker_disk_label(jsonx_get_obj(jsonx_get_obj(inspect, "Config"), "Labels"));
    const char *id = jsonx_get_str(inspect, "Id");
    int64_t used = 0;
    api_error_t ignored;
    if (quota <= 0 || !id || !docker_name_ok(id, 80) || docker_container_size_rw(rt, id, &used, &ignored) < 0)
        return false;
    return used > quota * 1024 * 1024;
}

const char *docker_rt_disk_mode(const runtime_t *base)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    return rt->disk_mode[0] ? rt->disk_mode : "watched";
}

/* Kills container id (SIGKILL); gone or already stopped is fine. */
static int docker_container_kill(docker_runtime_t *rt, const char *id, api_error_t *err)
{
    char path[160];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/containers/%s/kill?signal=KILL", id);
    int r = docker_call(rt, "POST", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    /* 404: gone; 409: not running any more. */
    if (r == 0 && rep.status != 204 && rep.status != 404 && rep.status != 409) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot kill container %.12s: %s", id, msg);
    }
    docker_reply_release(&rep);
    return r;
}

int docker_rt_disk_enforce(runtime_t *base, const char *cluster_id, const char *worker_name,
                           runtime_disk_stop_t *ret, size_t max, size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *list = NULL;
    char label[160];
    *ret_n = 0;
    if (cluster_id && *cluster_id)
        snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_CLUSTER, cluster_id);
    else
        snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SANDBOX);
    int r = docker_container_list(rt, label, &list, err);
    if (r < 0)
        return r;
    size_t n = json_object_array_length(list);
    for (size_t i = 0; i < n && i < DOCKER_DISK_PASS_MAX && !docker_cancelled(rt); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        json_object *labels = jsonx_get_obj(c, "Labels");
        const char *id = jsonx_get_str(c, "Id"), *state = jsonx_get_str(c, "State");
        const char *sbx = jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX);
        const char *maker = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
        int64_t quota = docker_disk_label(labels), used = 0;
        if (quota <= 0 || !id || !docker_name_ok(id, 80) || !sbx || !docker_name_ok(sbx, SBX_ID_MAX) || !state ||
            strcmp(state, "running") != 0)
            continue;
        if (worker_name && *worker_name && maker && strcmp(maker, worker_name) != 0)
            continue;
        api_error_t e;
        if (docker_container_size_rw(rt, id, &used, &e) < 0 || used <= quota * 1024 * 1024)
            continue;
        if (docker_container_kill(rt, id, &e) < 0) {
            r = api_error_set(err, e.code, "%s", e.message);
            continue;
        }
        if (*ret_n < max) {
            runtime_disk_stop_t *s = &ret[(*ret_n)++];
            snprintf(s->sandbox_id, sizeof s->sandbox_id, "%s", sbx);
            s->used_bytes = used;
            s->quota_mib = quota;
        }
    }
    json_object_put(list);
    return r;
}
