/* The Docker backend's snapshots: a sandbox's writable layer committed as a
 * local image of the reserved repository (SPEC_SNAPSHOT_REPO), labelled
 * with whose it is; listed for the heartbeat, checked before a create
 * starts from one, removed when the controller no longer wants it. */
#include "docker_internal.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"

#include <curl/curl.h>
#include <poll.h>
#include <sodium.h>
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

static bool snapshot_mine(docker_runtime_t *rt, const char *id, const char *tenant, const char *cluster,
                          const char *worker, char *out, size_t outlen, json_object **ret_inspect);

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
    if (req->memory) /* a commit keeps files only */
        return api_error_set(err, API_INVALID_ARGUMENT, "memory: a container's snapshot keeps its files, not its "
                             "memory (that is microvm's); snapshot it without memory");
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
    char image[160], path[256];
    json_object *have = NULL;
    if (!ids_valid("snp", snapshot_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed snapshot id");
    int r = 0;
    if (!snapshot_mine(rt, snapshot_id, NULL, NULL, worker_name, image, sizeof image, NULL)) {
        spec_snapshot_image(snapshot_id, image, sizeof image);
        r = snapshot_inspect(rt, image, &have, err);
        if (r < 0 || !have)
            return r; /* gone already */
        json_object_put(have);
        return api_error_set(err, API_NOT_FOUND, "image %s is not a snapshot this worker holds", image);
    }
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
    (void)have;
    bool ok = snapshot_mine(rt, snapshot_id, tenant ? tenant : "", cluster_id, worker_name, image, imagelen, NULL);
    if (!ok)
        return api_error_set(err, API_IMAGE_UNAVAILABLE, "snapshot %s is not on worker %s", snapshot_id,
                             worker_name ? worker_name : "?");
    return 0;
}

int docker_rt_snapshot_image(runtime_t *base, const runtime_create_req_t *req, char *image, size_t len,
                             api_error_t *err)
{
    return docker_snapshot_image_for((docker_runtime_t *)base, req->spec->from,
                                     req->tenant ? req->tenant : req->spec->tenant, req->cluster_id, req->worker_name,
                                     image, len, err);
}

/* ---- copies between workers (docs/snapshots.md "Copies") ---------------- */

void docker_snapshot_copy_image(const char *snapshot_id, const char *worker_name, char *out, size_t outlen)
{
    /* A tag of its own per worker: workers that share one Docker daemon
     * each keep their copy (the maker's tag is sandbox-snapshot:<id>). */
    unsigned char h[16];
    char hex[33];
    crypto_generichash(h, sizeof h, (const unsigned char *)(worker_name ? worker_name : ""),
                       worker_name ? strlen(worker_name) : 0, NULL, 0);
    sodium_bin2hex(hex, sizeof hex, h, 6);
    snprintf(out, outlen, "%s:%s-copy-%s", SPEC_SNAPSHOT_REPO, snapshot_id, hex);
}

/* The name of snapshot id's image that is this worker's (its own commit,
 * or its copy), into out; false when it holds none. */
static bool snapshot_mine(docker_runtime_t *rt, const char *id, const char *tenant, const char *cluster,
                          const char *worker, char *out, size_t outlen, json_object **ret_inspect)
{
    for (int k = 0; k < 2; k++) {
        json_object *have = NULL;
        api_error_t ignored;
        if (k == 0)
            spec_snapshot_image(id, out, outlen);
        else
            docker_snapshot_copy_image(id, worker, out, outlen);
        if (snapshot_inspect(rt, out, &have, &ignored) < 0 || !have)
            continue;
        bool ok = snapshot_labels_match(jsonx_get_obj(jsonx_get_obj(have, "Config"), "Labels"), id, tenant, cluster,
                                        worker);
        if (ok && ret_inspect)
            *ret_inspect = have;
        else
            json_object_put(have);
        if (ok)
            return true;
    }
    return false;
}

typedef struct export_io {
    const runtime_snapshot_export_req_t *req;
    bool stop;
    long status;
    sbuf_t error_body;
} export_io_t;

static size_t export_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    export_io_t *io = ud;
    size_t n = size * nmemb;
    if (io->status != 200) {
        sbuf_append(&io->error_body, p, n);
        return n;
    }
    if (io->req->on_data(io->req->ud, p, n) < 0) {
        io->stop = true;
        return 0;
    }
    return n;
}

static size_t export_header_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    export_io_t *io = ud;
    size_t n = size * nmemb;
    int code = 0;
    if (n > 9 && strncmp(p, "HTTP/", 5) == 0 && sscanf(p, "HTTP/%*s %d", &code) == 1)
        io->status = code;
    return n;
}

static int export_xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    export_io_t *io = ud;
    const runtime_snapshot_export_req_t *req = io->req;
    for (size_t i = 0; i < req->nstop_fds; i++) {
        struct pollfd pf = { .fd = req->stop_fds[i], .events = POLLIN };
        if (poll(&pf, 1, 0) > 0) {
            io->stop = true;
            return 1;
        }
    }
    return 0;
}

int docker_rt_snapshot_export(runtime_t *base, const runtime_snapshot_export_req_t *req, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char image[160], path[256];
    if (!ids_valid("snp", req->snapshot_id) || !req->on_data)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed snapshot export");
    if (!snapshot_mine(rt, req->snapshot_id, NULL, NULL, req->worker_name, image, sizeof image, NULL))
        return api_error_set(err, API_NOT_FOUND, "snapshot %s is not on worker %s", req->snapshot_id,
                             req->worker_name ? req->worker_name : "?");
    char *esc = curl_easy_escape(NULL, image, 0);
    if (!esc)
        return api_error_set(err, API_INTERNAL, "out of memory");
    snprintf(path, sizeof path, "/images/%s/get", esc);
    curl_free(esc);
    struct curl_slist *hl = NULL;
    CURL *h = docker_handle_new(rt, "GET", path, NULL, 0, NULL, 0, &hl);
    if (!h)
        return api_error_set(err, API_INTERNAL, "out of memory");
    export_io_t io = { .req = req };
    sbuf_init(&io.error_body, 4096);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, export_header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &io);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, export_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &io);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, export_xferinfo_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &io);
    CURLcode cr = curl_easy_perform(h);
    int r = 0;
    if (io.stop)
        r = 0; /* asked to stop, or the receiver refused: not Docker's error */
    else if (cr != CURLE_OK)
        r = docker_transport_error(rt, cr, err);
    else if (io.status != 200)
        r = api_error_set(err, API_RUNTIME_ERROR, "docker image save %s: HTTP %ld %.200s", image, io.status,
                          io.error_body.len ? io.error_body.data : "");
    curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    sbuf_release(&io.error_body);
    return r;
}

typedef struct import_io {
    runtime_files_read_fn read;
    void *ud;
    bool failed;
} import_io_t;

static size_t import_read_cb(char *buf, size_t size, size_t nmemb, void *ud)
{
    import_io_t *io = ud;
    ptrdiff_t n = io->read(io->ud, buf, size * nmemb);
    if (n < 0) {
        io->failed = true;
        return CURL_READFUNC_ABORT;
    }
    return (size_t)n;
}

static size_t import_body_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    sbuf_append(ud, p, size * nmemb);
    return size * nmemb;
}

/* Removes container id, quietly (a leftover of a relabel). */
static void import_discard(docker_runtime_t *rt, const char *id)
{
    api_error_t ignored;
    docker_container_delete(rt, id, &ignored);
}

int docker_rt_snapshot_import(runtime_t *base, const runtime_snapshot_req_t *req, runtime_files_read_fn read,
                              void *ud, runtime_snapshot_t *ret, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char plain[128], copy[160], path[384], cid[80] = "";
    json_object *have = NULL, *body = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    memset(ret, 0, sizeof *ret);
    if (!ids_valid("snp", req->snapshot_id) || !read || !req->worker_name)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed snapshot import");
    snprintf(ret->id, sizeof ret->id, "%s", req->snapshot_id);
    snprintf(ret->tenant, sizeof ret->tenant, "%s", req->tenant ? req->tenant : "");
    /* a retried attempt: the copy is here already */
    if (snapshot_mine(rt, req->snapshot_id, req->tenant, req->cluster_id, req->worker_name, copy, sizeof copy,
                      &have)) {
        snapshot_measure(rt, copy, have, ret);
        json_object_put(have);
        return 0;
    }
    spec_snapshot_image(req->snapshot_id, plain, sizeof plain);
    docker_snapshot_copy_image(req->snapshot_id, req->worker_name, copy, sizeof copy);
    /* Whether the maker's tag is here before the load: on a Docker daemon
     * shared with the maker it is, and stays the maker's. */
    int r = snapshot_inspect(rt, plain, &have, err);
    if (r < 0)
        return r;
    bool plain_before = have != NULL;
    if (have)
        json_object_put(have);
    have = NULL;

    struct curl_slist *hl = NULL;
    CURL *h = docker_handle_new(rt, "POST", "/images/load?quiet=1", NULL, 0, NULL, 0, &hl);
    if (!h)
        return api_error_set(err, API_INTERNAL, "out of memory");
    sbuf_t out;
    sbuf_init(&out, 64 * 1024);
    import_io_t io = { .read = read, .ud = ud };
    hl = curl_slist_append(hl, "Content-Type: application/x-tar");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
    curl_easy_setopt(h, CURLOPT_READFUNCTION, import_read_cb);
    curl_easy_setopt(h, CURLOPT_READDATA, &io);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, import_body_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
    CURLcode cr = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    if (io.failed)
        r = api_error_set(err, API_RUNTIME_ERROR, "the snapshot's bytes stopped coming from the controller");
    else if (cr != CURLE_OK)
        r = docker_transport_error(rt, cr, err);
    else if (status != 200 || (out.data && strstr(out.data, "\"error")))
        r = api_error_set(err, API_RUNTIME_ERROR, "docker image load: HTTP %ld %.200s", status,
                          out.len ? out.data : "");
    sbuf_release(&out);
    if (r < 0)
        return r;
    /* What came must be that snapshot, of this tenant and installation
     * (made by another worker): the controller's word is not enough. */
    r = snapshot_inspect(rt, plain, &have, err);
    if (r < 0)
        return r;
    json_object *labels = jsonx_get_obj(jsonx_get_obj(have, "Config"), "Labels");
    const char *maker = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
    if (!have || !maker || !snapshot_labels_match(labels, req->snapshot_id, req->tenant, req->cluster_id, maker)) {
        if (have)
            json_object_put(have);
        return api_error_set(err, API_POLICY_DENIED, "the image that came is not snapshot %s of tenant %s",
                             req->snapshot_id, req->tenant ? req->tenant : "?");
    }
    json_object_put(have);
    have = NULL;
    /* Relabelled as this worker's: a container of it (never started)
     * committed with our labels, under this worker's copy tag. */
    body = json_object_new_object();
    jsonx_add_str(body, "Image", plain);
    json_object *cl = json_object_new_object();
    jsonx_add_str(cl, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_PROBE);
    jsonx_add_str(cl, RUNTIME_LABEL_WORKER, req->worker_name);
    jsonx_add(body, "Labels", cl);
    json_object *hc = json_object_new_object();
    jsonx_add_str(hc, "NetworkMode", "none");
    jsonx_add(body, "HostConfig", hc);
    r = docker_call(rt, "POST", "/containers/create", body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    json_object_put(body);
    body = NULL;
    if (r == 0 && (rep.status != 201 || !docker_reply_id(&rep, cid))) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot relabel the copy (create): %s", msg);
    }
    docker_reply_release(&rep);
    if (r < 0)
        return r;
    runtime_snapshot_req_t mine = *req;
    body = json_object_new_object();
    jsonx_add(body, "Labels", snapshot_labels(&mine));
    const char *colon = strchr(copy, ':');
    snprintf(path, sizeof path, "/commit?container=%s&repo=%s&tag=%s&pause=false", cid, SPEC_SNAPSHOT_REPO,
             colon ? colon + 1 : copy);
    r = docker_call(rt, "POST", path, body, DOCKER_COMMIT_TIMEOUT_MS, &rep, err);
    json_object_put(body);
    if (r == 0 && rep.status != 201 && rep.status != 200) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot relabel the copy (commit): %s", msg);
    }
    docker_reply_release(&rep);
    import_discard(rt, cid);
    /* the maker's tag the load brought (not on a shared daemon: the
     * maker's own) goes; the layers stay under the copy */
    if (r == 0 && !plain_before) {
        char dpath[192];
        snprintf(dpath, sizeof dpath, "/images/%s?force=false&noprune=true", plain);
        if (docker_call(rt, "DELETE", dpath, NULL, DOCKER_REMOVE_TIMEOUT_MS, &rep, err) == 0)
            docker_reply_release(&rep);
    }
    if (r < 0)
        return r;
    if (!snapshot_mine(rt, req->snapshot_id, req->tenant, req->cluster_id, req->worker_name, copy, sizeof copy,
                       &have))
        return api_error_set(err, API_RUNTIME_ERROR, "docker committed the copy of %s but does not list it",
                             req->snapshot_id);
    snapshot_measure(rt, copy, have, ret);
    json_object_put(have);
    log_info("worker", "copied snapshot %s here (%s)", req->snapshot_id, copy);
    return 0;
}
