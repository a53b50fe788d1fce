/* The Docker backend's snapshots: a sandbox's writable layer committed as a
 * local image of the reserved repository (SPEC_SNAPSHOT_REPO), labelled
 * with whose it is; listed for the heartbeat, checked before a create
 * starts from one, removed when the controller no longer wants it. */
#include "docker_internal.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Our labels on a snapshot image. Docker's commit merges the container's
 * own labels into the image's, so every label of ours a container carries
 * is set here too: a sandbox started from the image must not inherit the
 * source's identity, disk quota or egress rules. */
static json_object *snapshot_labels(const runtime_snapshot_req_t *req)
{
    json_object *l = json_object_new_object();
    jsonx_add_str(l, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SNAPSHOT);
    jsonx_add_str(l, RUNTIME_LABEL_SNAPSHOT, req->snapshot_id);
    jsonx_add_str(l, RUNTIME_LABEL_TENANT, req->tenant ? req->tenant : "");
    jsonx_add_str(l, RUNTIME_LABEL_CLUSTER, req->cluster_id ? req->cluster_id : "");
    jsonx_add_str(l, RUNTIME_LABEL_WORKER, req->worker_name ? req->worker_name : "");
    jsonx_add_str(l, RUNTIME_LABEL_SANDBOX, "");
    jsonx_add_str(l, RUNTIME_LABEL_DISK_MIB, "");
    jsonx_add_str(l, RUNTIME_LABEL_EGRESS_ALLOW, "");
    return l;
}

/* A template version's defaults into the commit's config (Docker merges
 * the container's own under them: Env by name; the others when unset). */
static void snapshot_config(json_object *body, json_object *config)
{
    json_object *env = jsonx_get_obj(config, "env");
    if (env) {
        json_object *list = json_object_new_array();
        json_object_object_foreach(env, k, v) {
            if (!json_object_is_type(v, json_type_string))
                continue;
            size_t n = strlen(k) + json_object_get_string_len(v) + 2;
            char *kv = malloc(n);
            if (!kv)
                continue;
            snprintf(kv, n, "%s=%s", k, json_object_get_string(v));
            json_object_array_add(list, json_object_new_string(kv));
            free(kv);
        }
        jsonx_add(body, "Env", list);
    }
    const char *wd = jsonx_get_str(config, "workdir"), *user = jsonx_get_str(config, "user");
    if (wd)
        jsonx_add_str(body, "WorkingDir", wd);
    if (user)
        jsonx_add_str(body, "User", user);
    json_object *cmd = jsonx_get_arr(config, "cmd"), *ep = jsonx_get_arr(config, "entrypoint");
    if (cmd)
        jsonx_add(body, "Cmd", json_object_get(cmd));
    if (ep)
        jsonx_add(body, "Entrypoint", json_object_get(ep));
    json_object *expose = jsonx_get_arr(config, "expose");
    if (expose) {
        json_object *ports = json_object_new_object();
        for (size_t i = 0; i < json_object_array_length(expose); i++) {
            int64_t p = json_object_get_int64(json_object_array_get_idx(expose, i));
            if (p < 1 || p > 65535)
                continue;
            char key[24];
            snprintf(key, sizeof key, "%lld/tcp", (long long)p);
            json_object_object_add(ports, key, json_object_new_object());
        }
        jsonx_add(body, "ExposedPorts", ports);
    }
}

/* Inspects image (NULL *ret when Docker has none of that name). */
static int snapshot_inspect(docker_runtime_t *rt, const char *image, json_object **ret, api_error_t *err)
{
    char path[160];
    docker_reply_t rep;
    *ret = NULL;
    snprintf(path, sizeof path, "/images/%s/json", image);
    int r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        return r;
    if (rep.status == 200) {
        *ret = docker_reply_json(&rep);
        if (!*ret)
            r = api_error_set(err, API_RUNTIME_ERROR, "docker image inspect %s: an unreadable answer", image);
    } else if (rep.status != 404) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "docker image inspect %s: %s", image, msg);
    }
    docker_reply_release(&rep);
    return r;
}

/* Whether an image's labels make it snapshot id of worker (and of
 * tenant and cluster when given). */
static bool snapshot_labels_match(json_object *labels, const char *id, const char *tenant, const char *cluster,
                                  const char *worker)
{
    const char *m = jsonx_get_str(labels, RUNTIME_LABEL_MANAGED), *s = jsonx_get_str(labels, RUNTIME_LABEL_SNAPSHOT);
    const char *t = jsonx_get_str(labels, RUNTIME_LABEL_TENANT), *c = jsonx_get_str(labels, RUNTIME_LABEL_CLUSTER);
    const char *w = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
    return m && strcmp(m, RUNTIME_MANAGED_SNAPSHOT) == 0 && s && strcmp(s, id) == 0 && w && worker &&
           strcmp(w, worker) == 0 && (!tenant || (t && strcmp(t, tenant) == 0)) &&
           (!cluster || !*cluster || (c && strcmp(c, cluster) == 0));
}

/* What the committed layer adds: the newest layer of the image's history. */
static int64_t snapshot_layer_bytes(docker_runtime_t *rt, const char *image)
{
    char path[160];
    json_object *h = NULL;
    api_error_t ignored;
    snprintf(path, sizeof path, "/images/%s/history", image);
    if (docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &h, &ignored) < 0)
        return -1;
    int64_t size = -1;
    if (json_object_is_type(h, json_type_array) && json_object_array_length(h) > 0)
        jsonx_get_int(json_object_array_get_idx(h, 0), "Size", &size);
    json_object_put(h);
    return size;
}

static void snapshot_measure(docker_runtime_t *rt, const char *image, json_object *inspect, runtime_snapshot_t *ret)
{
    ret->image_bytes = -1;
    jsonx_get_int(inspect, "Size", &ret->image_bytes);
    ret->size_bytes = snapshot_layer_bytes(rt, image);
}

int docker_rt_snapshot_create(runtime_t *base, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                              api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char image[128], path[384];
    json_object *have = NULL, *body = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    memset(ret, 0, sizeof *ret);
    if (!ids_valid("snp", req->snapshot_id) || !req->ref || !docker_name_ok(req->ref, 80))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed snapshot request (snapshot id or container)");
    snprintf(ret->id, sizeof ret->id, "%s", req->snapshot_id);
    snprintf(ret->tenant, sizeof ret->tenant, "%s", req->tenant ? req->tenant : "");
    spec_snapshot_image(req->snapshot_id, image, sizeof image);
    int r = snapshot_inspect(rt, image, &have, err);
    if (r < 0)
        return r;
    if (have) {
        /* a retried attempt: the first one's commit finished */
        if (!snapshot_labels_match(jsonx_get_obj(jsonx_get_obj(have, "Config"), "Labels"), req->snapshot_id,
                                   req->tenant, req->cluster_id, req->worker_name)) {
            json_object_put(have);
            return api_error_set(err, API_CONFLICT, "an image named %s exists and is not this snapshot", image);
        }
        snapshot_measure(rt, image, have, ret);
        json_object_put(have);
        return 0;
    }
    body = json_object_new_object();
    jsonx_add(body, "Labels", snapshot_labels(req));
    snapshot_config(body, req->config);
    snprintf(path, sizeof path, "/commit?container=%s&repo=%s&tag=%s&pause=true", req->ref, SPEC_SNAPSHOT_REPO,
             req->snapshot_id);
    r = docker_call(rt, "POST", path, body, DOCKER_COMMIT_TIMEOUT_MS, &rep, err);
    json_object_put(body);
    if (r < 0)
        goto cleanup;
    if (rep.status != 201 && rep.status != 200) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, rep.status == 404 ? API_NOT_FOUND : API_RUNTIME_ERROR, "docker commit: %s", msg);
        goto cleanup;
    }
    r = snapshot_inspect(rt, image, &have, err);
    if (r == 0 && !have)
        r = api_error_set(err, API_RUNTIME_ERROR, "docker committed %s but does not list it", image);
    if (r == 0)
        snapshot_measure(rt, image, have, ret);
cleanup:
    if (have)
        json_object_put(have);
    docker_reply_release(&rep);
    return r;
}

int docker_rt_snapshot_list(runtime_t *base, const char *cluster_id, const char *worker_name,
                            runtime_snapshot_t **ret, size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *list = NULL;
    *ret = NULL;
    *ret_n = 0;
    int r = docker_image_list(rt, &list, err);
    if (r < 0)
        return r;
    size_t count = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0, n = 0;
    runtime_snapshot_t *out = calloc(count ? (count < RUNTIME_MAX_SNAPSHOTS ? count : RUNTIME_MAX_SNAPSHOTS) : 1,
                                     sizeof *out);
    if (!out) {
        json_object_put(list);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    for (size_t i = 0; i < count && n < RUNTIME_MAX_SNAPSHOTS; i++) {
        json_object *img = json_object_array_get_idx(list, i), *labels = jsonx_get_obj(img, "Labels");
        const char *id = jsonx_get_str(labels, RUNTIME_LABEL_SNAPSHOT);
        if (!id || !ids_valid("snp", id) || !snapshot_labels_match(labels, id, NULL, cluster_id, worker_name))
            continue;
        runtime_snapshot_t *s = &out[n++];
        snprintf(s->id, sizeof s->id, "%s", id);
        const char *t = jsonx_get_str(labels, RUNTIME_LABEL_TENANT);
        snprintf(s->tenant, sizeof s->tenant, "%s", t ? t : "");
        s->size_bytes = -1;
        s->image_bytes = -1;
        jsonx_get_int(img, "Size", &s->image_bytes);
    }
    json_object_put(list);
    *ret = out;
    *ret_n = n;
    return 0;
}

int docker_rt_snapshot_remove(runtime_t *base, const char *snapshot_id, const char *worker_name, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char image[128], path[192];
    json_object *have = NULL;
    if (!ids_valid("snp", snapshot_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed snapshot id");
    spec_snapshot_image(snapshot_id, image, sizeof image);
    int r = snapshot_inspect(rt, image, &have, err);
    if (r < 0 || !have)
        return r;
    bool ours = snapshot_labels_match(jsonx_get_obj(jsonx_get_obj(have, "Config"), "Labels"), snapshot_id, NULL,
                                      NULL, worker_name);
    json_object_put(have);
    if (!ours)
        return api_error_set(err, API_NOT_FOUND, "image %s is not a snapshot this worker made", image);
    docker_reply_t rep;
    snprintf(path, sizeof path, "/images/%s?force=false&noprune=false", image);
    r = docker_call(rt, "DELETE", path, NULL, DOCKER_REMOVE_TIMEOUT_MS, &rep, err);
    if (r < 0)
        return r;
    if (rep.status == 409)
        r = api_error_set(err, API_CONFLICT, "snapshot %s is in use by a sandbox; removed once that sandbox is gone",
                          snapshot_id);
    else if (rep.status != 200 && rep.status != 404) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "docker image remove %s: %s", image, msg);
    }
    docker_reply_release(&rep);
    return r;
}

int docker_snapshot_image_for(docker_runtime_t *rt, const char *snapshot_id, const char *tenant,
                              const char *cluster_id, const char *worker_name, char *image, size_t imagelen,
                              api_error_t *err)
{
    json_object *have = NULL;
    if (!ids_valid("snp", snapshot_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "from must be a snapshot id on the worker (got \"%.64s\")",
                             snapshot_id);
    spec_snapshot_image(snapshot_id, image, imagelen);
    int r = snapshot_inspect(rt, image, &have, err);
    if (r < 0)
        return r;
    bool ok = have && snapshot_labels_match(jsonx_get_obj(jsonx_get_obj(have, "Config"), "Labels"), snapshot_id,
                                            tenant ? tenant : "", cluster_id, worker_name);
    if (have)
        json_object_put(have);
    if (!ok)
        return api_error_set(err, API_IMAGE_UNAVAILABLE, "snapshot %s is not on worker %s", snapshot_id,
                             worker_name ? worker_name : "?");
    return 0;
}
