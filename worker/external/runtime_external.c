/* The external driver backend (runtime_external.h): open with its probe,
 * what it offers, create, remove, ownership checks, inventory, images and
 * the operations table. The byte-moving calls are in external_io.c. */
#include "external_internal.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXT_COMPONENT "driver"
/* How long open waits for the driver's first hello. */
#define EXT_OPEN_WAIT_MS 15000
/* The run directories: "sbx-driver.XXXXXX" under $TMPDIR or /tmp, each
 * holding the lock its worker keeps (flock) for as long as it lives. */
#define EXT_RUNDIR_PREFIX "sbx-driver."
#define EXT_RUNDIR_LOCK "worker.lock"
/* How long an inventory waits for a driver being restarted. */
#define EXT_INVENTORY_WAIT_MS 2000

const char *ext_driver_ref(const char *ref)
{
    size_t n = sizeof EXTDRV_REF_PREFIX - 1;
    if (!ref || strncmp(ref, EXTDRV_REF_PREFIX, n) != 0 || !extdrv_ref_valid(ref + n))
        return NULL;
    return ref + n;
}

int runtime_external_parse_command(const char *value, char ***ret_argv, size_t *ret_argc, char *why, size_t whylen)
{
    json_object *o = NULL;
    api_error_t perr;
    char **argv = NULL;
    size_t n = 0;
    int r = SBX_EINVAL;
    if (!value || !*value) {
        snprintf(why, whylen, "worker_driver_command is empty (a JSON array of strings: the driver's argv)");
        return SBX_EINVAL;
    }
    if (jsonx_parse(value, strlen(value), &o, &perr) < 0 || !json_object_is_type(o, json_type_array)) {
        snprintf(why, whylen, "worker_driver_command must be a JSON array of strings, e.g. [\"/usr/bin/driver\"]");
        goto cleanup;
    }
    n = json_object_array_length(o);
    if (n == 0 || n > SBX_DRIVER_ARGV_MAX) {
        snprintf(why, whylen, "worker_driver_command must have 1..%d arguments (got %zu)", SBX_DRIVER_ARGV_MAX, n);
        goto cleanup;
    }
    argv = calloc(n + 1, sizeof *argv);
    if (!argv) {
        snprintf(why, whylen, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(o, i);
        const char *s = json_object_is_type(a, json_type_string) ? json_object_get_string(a) : NULL;
        size_t l = s ? (size_t)json_object_get_string_len(a) : 0;
        if (!s || l == 0 || l >= SBX_DRIVER_ARG_MAX || strlen(s) != l) {
            snprintf(why, whylen, "worker_driver_command argument %zu must be a non-empty string under %d bytes "
                     "without NUL", i, SBX_DRIVER_ARG_MAX);
            goto cleanup;
        }
        if (i == 0 && s[0] != '/' && strchr(s, '/')) {
            snprintf(why, whylen, "worker_driver_command's program must be an absolute path or a bare name");
            goto cleanup;
        }
        if (!(argv[i] = strdup(s))) {
            snprintf(why, whylen, "out of memory");
            r = SBX_ENOMEM;
            goto cleanup;
        }
    }
    *ret_argv = argv;
    *ret_argc = n;
    argv = NULL;
    r = 0;
cleanup:
    for (size_t i = 0; argv && i < n; i++)
        free(argv[i]);
    free(argv);
    if (o)
        json_object_put(o);
    return r;
}

/* ---- what it offers -------------------------------------------------------- */

static size_t ext_rt_isolation_classes(const runtime_t *base, isolation_t *ret, size_t max)
{
    const ext_runtime_t *rt = (const ext_runtime_t *)base;
    size_t n = 0;
    for (int c = 0; c < EXT_CLASSES && n < max; c++)
        if (rt->offered[c])
            ret[n++] = (isolation_t)c;
    return n;
}

static unsigned ext_rt_network_modes(const runtime_t *base, isolation_t cls)
{
    const ext_runtime_t *rt = (const ext_runtime_t *)base;
    return (int)cls >= 0 && (int)cls < EXT_CLASSES && rt->offered[cls] ? rt->net_modes[cls] : 0;
}

static const char *ext_rt_probe_result(const runtime_t *base, isolation_t cls)
{
    const ext_runtime_t *rt = (const ext_runtime_t *)base;
    return (int)cls >= 0 && (int)cls < EXT_CLASSES && rt->considered[cls] ? rt->probe[cls] : NULL;
}

static const char *ext_rt_network_unavailable(const runtime_t *base, isolation_t cls, net_mode_t mode)
{
    const ext_runtime_t *rt = (const ext_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= EXT_CLASSES || (int)mode < 0 || (int)mode > NET_OPEN)
        return "unknown class or network mode";
    if (!rt->offered[cls])
        return rt->considered[cls] ? rt->probe[cls] : "the class is not offered by this worker";
    return rt->net_modes[cls] & (1u << mode) ? "" : rt->net_why;
}

/* ---- calls ------------------------------------------------------------------ */

static int ext_rt_ping(runtime_t *base, long timeout_ms, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    extdrv_hello_t h;
    if (extdrv_wait_ready(rt->drv, timeout_ms, &h, err) < 0)
        return SBX_EUNAVAIL;
    return 0;
}

/* The disk quota a sandbox object's labels carry (RUNTIME_LABEL_DISK_MIB,
 * as the worker gave it at create), 0 when none or malformed (the Docker
 * backend's docker_disk_label reads the same label). */
static int64_t ext_disk_label(json_object *labels)
{
    const char *v = jsonx_get_str(labels, RUNTIME_LABEL_DISK_MIB);
    if (!v || !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 12)
        return 0;
    errno = 0;
    long long q = strtoll(v, NULL, 10);
    return errno == 0 && q >= SBX_DISK_MIB_MIN && q <= SBX_DISK_MIB_MAX ? (int64_t)q : 0;
}

/* Checks labels (a sandbox object's) against who. */
static int ext_owner_labels(json_object *labels, const runtime_owner_t *who, api_error_t *err)
{
    struct {
        const char *label, *want;
    } checks[] = {
        { RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SANDBOX },
        { RUNTIME_LABEL_SANDBOX, who->sandbox_id },
        { RUNTIME_LABEL_CLUSTER, who->cluster_id && *who->cluster_id ? who->cluster_id : NULL },
        { RUNTIME_LABEL_WORKER, who->worker_name },
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if (!checks[i].want)
            continue;
        const char *have = jsonx_get_str(labels, checks[i].label);
        if (!have || strcmp(have, checks[i].want) != 0) {
            api_error_set(err, API_NOT_FOUND, "the driver's sandbox is not this sandbox's (label %s differs)",
                          checks[i].label);
            return SBX_EPERM;
        }
    }
    return 0;
}

/* inspect by ref (an "x:" one) or, without, by sandbox id: the object and
 * its labels (a new reference in *ret_o). */
static int ext_inspect(ext_runtime_t *rt, const char *sandbox_id, const char *ref, runtime_object_t *ret,
                       json_object **ret_o, api_error_t *err)
{
    json_object *p = json_object_new_object(), *res = NULL;
    const char *dref = ref && *ref ? ext_driver_ref(ref) : NULL;
    if (ref && *ref && !dref) {
        json_object_put(p);
        api_error_set(err, API_NOT_FOUND, "no such sandbox object %.80s in the driver", ref);
        return SBX_ENOTFOUND;
    }
    if (dref)
        jsonx_add_str(p, "ref", dref);
    else
        jsonx_add_str(p, "sandbox_id", sandbox_id);
    int r = extdrv_call(rt->drv, "inspect", p, EXTDRV_QUERY_MS, &res, err);
    if (r < 0)
        return err->code == API_NOT_FOUND ? SBX_ENOTFOUND : r;
    r = extdrv_object_parse(res, ret, NULL, err);
    if (r == 0 && dref && strcmp(ret->ref, ref) != 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "the driver answered inspect of %s with another sandbox", ref);
    if (r < 0) {
        json_object_put(res);
        return r;
    }
    *ret_o = res;
    return 0;
}

static int ext_rt_check_owner(runtime_t *base, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                              api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    runtime_object_t obj;
    json_object *o = NULL;
    int r = ext_inspect(rt, who->sandbox_id, ref, &obj, &o, err);
    if (r < 0)
        return r;
    r = ext_owner_labels(jsonx_get_obj(o, "labels"), who, err);
    json_object_put(o);
    if (r == 0)
        snprintf(ret_ref, 80, "%s", obj.ref);
    return r;
}

/* The check of route, logs and file targets: the sandbox's object, made by
 * worker_name; its disk quota label is the size of its filesystem (a VM's
 * disk holds the image too). */
static int ext_rt_files_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                               int64_t *ret_fs_bytes, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    runtime_owner_t who = { .sandbox_id = sandbox_id, .worker_name = worker_name };
    runtime_object_t obj;
    json_object *o = NULL;
    int r = ext_inspect(rt, sandbox_id, NULL, &obj, &o, err);
    if (r < 0)
        return r;
    json_object *labels = jsonx_get_obj(o, "labels");
    r = ext_owner_labels(labels, &who, err);
    if (r == 0) {
        snprintf(ret_ref, 80, "%s", obj.ref);
        if (ret_fs_bytes)
            *ret_fs_bytes = ext_disk_label(labels) * 1024 * 1024;
    }
    json_object_put(o);
    if (r == SBX_EPERM)
        api_error_set(err, API_NOT_FOUND, "no sandbox %.40s on this worker", sandbox_id);
    return r;
}

static int ext_rt_dial(runtime_t *base, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    char ref[80];
    int r = ext_rt_files_target(base, req->sandbox_id, req->worker_name, ref, NULL, err);
    if (r < 0)
        return r;
    if (!rt->hello.cap_dial)
        return api_error_set(err, API_UNAVAILABLE, "driver %s cannot reach ports in its sandboxes (no dial)",
                             extdrv_name(rt->drv));
    return ext_dial(rt, ext_driver_ref(ref), req, ret_fd, err);
}

static int ext_rt_logs_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                              api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    int r = ext_rt_files_target(base, sandbox_id, worker_name, ret_ref, NULL, err);
    if (r < 0)
        return r;
    return api_error_set(err, API_UNAVAILABLE, "sandboxes of driver %s have no logs (protocol %d has no logs method)",
                         extdrv_name(rt->drv), EXTDRV_PROTOCOL);
}

static int ext_rt_logs_stream(runtime_t *base, const char *ref, const runtime_logs_req_t *req, api_error_t *err)
{
    (void)ref;
    (void)req;
    ext_runtime_t *rt = (ext_runtime_t *)base;
    return api_error_set(err, API_UNAVAILABLE, "sandboxes of driver %s have no logs", extdrv_name(rt->drv));
}


/* create: the driver's ref as "x:REF". */
static int ext_create(ext_runtime_t *rt, json_object *params, long timeout_ms, char ret_ref[80], bool *ret_memory,
                      api_error_t *err)
{
    json_object *res = NULL;
    int r = extdrv_call(rt->drv, "create", params, timeout_ms, &res, err);
    if (r < 0)
        return r;
    if (ret_memory)
        jsonx_get_bool(res, "memory", ret_memory);
    const char *ref = jsonx_get_str(res, "ref");
    if (!extdrv_ref_valid(ref))
        r = api_error_set(err, API_RUNTIME_ERROR, "driver %s answered create without a valid ref",
                          extdrv_name(rt->drv));
    else
        snprintf(ret_ref, 80, EXTDRV_REF_PREFIX "%s", ref);
    json_object_put(res);
    return r;
}

static int ext_rt_create(runtime_t *base, const runtime_create_req_t *req, char ret_ref[80], runtime_exit_t *ret_exit,
                         api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    if (ret_exit)
        memset(ret_exit, 0, sizeof *ret_exit);
    isolation_t cls = req->isolation;
    if ((int)cls < 0 || (int)cls >= EXT_CLASSES || !rt->offered[cls])
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "isolation %s is not offered by driver %s: %s",
                             isolation_name(cls), extdrv_name(rt->drv),
                             (int)cls >= 0 && (int)cls < EXT_CLASSES && rt->considered[cls] ? rt->probe[cls]
                                                                                            : "not declared");
    /* open through a NIC the worker's egress filter takes (the driver's
     * capability nic), or a mode the driver makes itself */
    bool by_nic = req->nic && rt->hello.cap_nic && req->spec->network == NET_OPEN;
    if (req->nic && !by_nic)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "driver %s takes no NIC for network %s",
                             extdrv_name(rt->drv), net_mode_name(req->spec->network));
    if (!by_nic && !(rt->net_modes[cls] & (1u << req->spec->network)))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "isolation %s cannot provide network %s on this worker",
                             isolation_name(cls), net_mode_name(req->spec->network));
    /* the snapshot repository's images only as the worker put them there */
    if (spec_image_is_snapshot(req->spec->image) && !req->image_of_snapshot)
        return api_error_set(err, API_POLICY_DENIED, "image %.200s names the snapshot repository: start from a "
                             "snapshot with from", req->spec->image);
    /* never a fresh sandbox in place of one from a snapshot */
    if (req->spec->from && *req->spec->from && !rt->hello.cap_snapshots)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "driver %s cannot start a sandbox from a snapshot",
                             extdrv_name(rt->drv));
    /* volumes come as disks the worker claimed (runtime_multi.c): never
     * a create without them */
    if (req->spec->nvolumes > 0 && (!rt->hello.cap_disks || req->ndisks != req->spec->nvolumes))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "driver %s cannot mount volumes%s", extdrv_name(rt->drv),
                             rt->hello.cap_disks ? " without this worker's volume support" : " (no disks capability)");
    return ext_create(rt, extdrv_create_params(req), EXTDRV_CREATE_MS, ret_ref, req->ret_memory, err);
}

static bool ext_rt_takes_nic(const runtime_t *base) { return ((const ext_runtime_t *)base)->hello.cap_nic; }

static int ext_rt_remove(runtime_t *base, const char *sandbox_id, const char *ref, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    json_object *p = json_object_new_object();
    const char *dref = ext_driver_ref(ref);
    if (dref)
        jsonx_add_str(p, "ref", dref);
    else
        jsonx_add_str(p, "sandbox_id", sandbox_id);
    int r = extdrv_call(rt->drv, "remove", p, EXTDRV_REMOVE_MS, NULL, err);
    if (r < 0 && err->code == API_NOT_FOUND)
        r = 0; /* gone already */
    return r;
}

/* pause / resume through the driver's methods of those names (protocol
 * 1's optional methods: a driver without them answers "method not found",
 * an error the operation reports). */
static int ext_rt_freeze(runtime_t *base, const char *ref, bool pause, bool *ret_memory, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    const char *dref = ext_driver_ref(ref);
    if (!dref)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox reference");
    json_object *p = json_object_new_object(), *res = NULL;
    jsonx_add_str(p, "ref", dref);
    int r = extdrv_call(rt->drv, pause ? "pause" : "resume", p, EXTDRV_REMOVE_MS, &res, err);
    if (r == 0 && ret_memory) {
        bool mem = false;
        jsonx_get_bool(res, "memory", &mem);
        *ret_memory = mem;
    }
    json_object_put(res);
    return r;
}

/* ---- snapshots (docs/snapshots.md): the driver's snapshot, snapshots and
 * snapshot_remove methods (capability "snapshots"), snapshot_export and
 * snapshot_import (capability "snapshot_copy"); the worker's name and
 * cluster travel as labels, as a Docker snapshot's do */

static void ext_snapshot_measure(json_object *o, runtime_snapshot_t *ret)
{
    memset(ret, 0, sizeof *ret);
    const char *id = jsonx_get_str(o, "id"), *tenant = jsonx_get_str(o, "tenant");
    snprintf(ret->id, sizeof ret->id, "%s", id ? id : "");
    snprintf(ret->tenant, sizeof ret->tenant, "%s", tenant ? tenant : "");
    if (!jsonx_get_int(o, "size_bytes", &ret->size_bytes))
        ret->size_bytes = -1;
    if (!jsonx_get_int(o, "image_bytes", &ret->image_bytes))
        ret->image_bytes = -1;
    jsonx_get_bool(o, "memory", &ret->memory);
}

/* A snapshot call's snapshot_id, tenant and labels (this worker's: its
 * name and cluster), for snapshot and snapshot_import. */
static json_object *ext_snapshot_params(const runtime_snapshot_req_t *req)
{
    json_object *p = json_object_new_object(), *labels = json_object_new_object();
    jsonx_add_str(p, "snapshot_id", req->snapshot_id);
    jsonx_add_str(p, "tenant", req->tenant ? req->tenant : "");
    jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SNAPSHOT);
    jsonx_add_str(labels, RUNTIME_LABEL_CLUSTER, req->cluster_id ? req->cluster_id : "");
    jsonx_add_str(labels, RUNTIME_LABEL_WORKER, req->worker_name ? req->worker_name : "");
    jsonx_add(p, "labels", labels);
    return p;
}

static int ext_rt_snapshot_create(runtime_t *base, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                                  api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    if (!rt->hello.cap_snapshots)
        return api_error_set(err, API_UNAVAILABLE, "driver %s cannot take snapshots", extdrv_name(rt->drv));
    const char *dref = ext_driver_ref(req->ref);
    if (!dref)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox reference");
    json_object *p = ext_snapshot_params(req), *res = NULL;
    jsonx_add_str(p, "ref", dref);
    if (req->memory)
        jsonx_add_bool(p, "memory", true);
    /* the guest's sync and the disk's copy: bounded like a remove's */
    int r = extdrv_call(rt->drv, "snapshot", p, EXTDRV_CREATE_MS, &res, err);
    if (r == 0)
        ext_snapshot_measure(res, ret);
    if (r == 0 && req->memory && !ret->memory) /* a driver that ignored it: no snapshot claims less than asked */
        r = api_error_set(err, API_INVALID_ARGUMENT, "driver %s kept no memory in snapshot %s (it has the files); "
                          "snapshot without memory", extdrv_name(rt->drv), req->snapshot_id);
    json_object_put(res);
    return r;
}

static int ext_rt_snapshot_list(runtime_t *base, const char *cluster_id, const char *worker_name,
                                runtime_snapshot_t **ret, size_t *ret_n, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    *ret = NULL;
    *ret_n = 0;
    if (!rt->hello.cap_snapshots)
        return 0;
    json_object *res = NULL;
    int r = extdrv_call(rt->drv, "snapshots", NULL, EXTDRV_QUERY_MS, &res, err);
    if (r < 0)
        return r;
    json_object *list = jsonx_get_arr(res, "snapshots");
    size_t n = list ? json_object_array_length(list) : 0;
    runtime_snapshot_t *all = calloc(n ? n : 1, sizeof *all);
    size_t k = 0;
    for (size_t i = 0; all && i < n && k < RUNTIME_MAX_SNAPSHOTS; i++) {
        json_object *o = json_object_array_get_idx(list, i), *l = jsonx_get_obj(o, "labels");
        const char *cl = jsonx_get_str(l, RUNTIME_LABEL_CLUSTER), *wn = jsonx_get_str(l, RUNTIME_LABEL_WORKER);
        const char *id = jsonx_get_str(o, "id");
        if (!id || !ids_valid("snp", id) || (cluster_id && (!cl || strcmp(cl, cluster_id) != 0)) ||
            (worker_name && (!wn || strcmp(wn, worker_name) != 0)))
            continue;
        ext_snapshot_measure(o, &all[k++]);
    }
    json_object_put(res);
    if (!all)
        return api_error_set(err, API_INTERNAL, "out of memory");
    *ret = all;
    *ret_n = k;
    return 0;
}

static int ext_rt_snapshot_remove(runtime_t *base, const char *snapshot_id, const char *worker_name,
                                  api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    (void)worker_name; /* the driver's snapshots are this worker's */
    if (!rt->hello.cap_snapshots)
        return 0;
    json_object *p = json_object_new_object();
    jsonx_add_str(p, "snapshot_id", snapshot_id);
    return extdrv_call(rt->drv, "snapshot_remove", p, EXTDRV_REMOVE_MS, NULL, err);
}

/* A copy between workers (capability snapshot_copy): the driver's tar of a
 * snapshot's files, sent as it comes (snapshot_export) or taken after the
 * driver's checks as this worker's, with its labels (snapshot_import). */
static int ext_snapshot_data(void *ud, const char *data, size_t n)
{
    const runtime_snapshot_export_req_t *req = ud;
    return req->on_data(req->ud, data, n);
}

static int ext_rt_snapshot_export(runtime_t *base, const runtime_snapshot_export_req_t *req, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    if (!rt->hello.cap_snapshot_copy)
        return api_error_set(err, API_UNAVAILABLE, "driver %s cannot send a snapshot to another worker",
                             extdrv_name(rt->drv));
    if (!ids_valid("snp", req->snapshot_id) || !req->on_data)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed snapshot export");
    json_object *p = json_object_new_object();
    jsonx_add_str(p, "snapshot_id", req->snapshot_id);
    ext_download_t dl = { .on_data = ext_snapshot_data, .ud = (void *)req, .stop_fds = req->stop_fds,
                          .nstop_fds = req->nstop_fds };
    return ext_download(rt, "snapshot_export", p, &dl, err);
}

static int ext_rt_snapshot_import(runtime_t *base, const runtime_snapshot_req_t *req, runtime_files_read_fn read,
                                  void *ud, runtime_snapshot_t *ret, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    if (!rt->hello.cap_snapshot_copy)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "driver %s cannot take a snapshot's copy",
                             extdrv_name(rt->drv));
    json_object *p = ext_snapshot_params(req), *res = NULL;
    /* the controller bounds what it relays (the snapshot's size); the driver, its own disk */
    ext_upload_t up = { .read = read, .ud = ud, .max_bytes = INT64_MAX };
    int64_t total = 0;
    int r = ext_upload(rt, "snapshot_import", p, &up, &total, &res, err);
    if (r == 0)
        ext_snapshot_measure(res, ret);
    if (r == 0 && strcmp(ret->id, req->snapshot_id) != 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "driver %s kept the copy of %s as %.64s", extdrv_name(rt->drv),
                          req->snapshot_id, ret->id);
    if (res)
        json_object_put(res);
    return r;
}

static int ext_rt_pause(runtime_t *base, const char *ref, bool *ret_memory, api_error_t *err)
{
    return ext_rt_freeze(base, ref, true, ret_memory, err);
}

static int ext_rt_resume(runtime_t *base, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                         api_error_t *err)
{
    (void)sandbox_id;
    (void)ret_exit;
    return ext_rt_freeze(base, ref, false, NULL, err);
}

static int ext_rt_inventory(runtime_t *base, const char *cluster_id, const char *worker_name,
                            runtime_object_t **ret, size_t *ret_n, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    json_object *res = NULL;
    extdrv_hello_t h;
    /* the heartbeat asks: a driver being restarted fails it soon, not after
     * the whole deadline (the heartbeat then leaves the inventory out) */
    int r = extdrv_wait_ready(rt->drv, EXT_INVENTORY_WAIT_MS, &h, err);
    if (r == 0)
        r = extdrv_call(rt->drv, "inventory", NULL, EXTDRV_QUERY_MS, &res, err);
    if (r < 0)
        return r;
    json_object *list = jsonx_get_arr(res, "sandboxes");
    size_t n = list ? json_object_array_length(list) : 0, k = 0;
    runtime_object_t *objs = NULL;
    if (!list || n > SBX_DRIVER_INVENTORY_MAX) {
        r = api_error_set(err, API_RUNTIME_ERROR, "driver %s answered inventory without a valid sandboxes list",
                          extdrv_name(rt->drv));
        goto cleanup;
    }
    objs = calloc(n ? n : 1, sizeof *objs);
    if (!objs) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *labels = NULL;
        if (extdrv_object_parse(json_object_array_get_idx(list, i), &objs[k], &labels, err) < 0) {
            r = SBX_ERUNTIME;
            goto cleanup;
        }
        const char *m = jsonx_get_str(labels, RUNTIME_LABEL_MANAGED);
        const char *cl = jsonx_get_str(labels, RUNTIME_LABEL_CLUSTER);
        const char *w = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
        if (!m || strcmp(m, RUNTIME_MANAGED_SANDBOX) != 0)
            continue;
        if (cluster_id && (!cl || strcmp(cl, cluster_id) != 0))
            continue;
        if (worker_name && w && strcmp(w, worker_name) != 0)
            continue;
        k++;
    }
    *ret = objs;
    *ret_n = k;
    objs = NULL;
cleanup:
    if (objs)
        runtime_inventory_free(objs, n);
    json_object_put(res);
    return r;
}

static int ext_rt_images(runtime_t *base, char ***ret, size_t *ret_n, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    json_object *res = NULL;
    char **names = calloc(RUNTIME_MAX_IMAGES, sizeof *names);
    size_t n = 0;
    if (!names)
        return api_error_set(err, API_INTERNAL, "out of memory");
    if (rt->hello.cap_images) {
        int r = extdrv_call(rt->drv, "images", NULL, EXTDRV_QUERY_MS, &res, err);
        if (r < 0) {
            free(names);
            return r;
        }
        json_object *list = jsonx_get_arr(res, "images");
        for (size_t i = 0; list && i < json_object_array_length(list) && n < RUNTIME_MAX_IMAGES; i++) {
            const char *s = json_object_get_string(json_object_array_get_idx(list, i));
            if (s && *s && strlen(s) <= RUNTIME_MAX_IMAGE_NAME && (names[n] = strdup(s)))
                n++;
        }
        json_object_put(res);
    }
    *ret = names;
    *ret_n = n;
    return 0;
}

static void ext_rt_set_cancel_flag(runtime_t *base, const atomic_int *flag)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    rt->cancel = flag;
    extdrv_set_cancel(rt->drv, flag);
}

static const char *ext_rt_disk_mode(const runtime_t *base)
{
    (void)base;
    return "enforced by the driver: disk_mib is the sandbox's disk size";
}

/* Removes a run directory: its socket, its lock, itself (left when it holds
 * anything else). */
static void ext_rundir_remove(const char *dir)
{
    char path[400];
    snprintf(path, sizeof path, "%s/streams.sock", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/" EXT_RUNDIR_LOCK, dir);
    unlink(path);
    rmdir(dir);
}

/* Removes the run directories of this user's workers that died without
 * removing theirs (kill -9): those whose lock nobody holds. */
static void ext_rundirs_remove_stale(const char *tmp)
{
    DIR *dir = opendir(tmp);
    struct dirent *e;
    if (!dir)
        return;
    while ((e = readdir(dir))) {
        char path[300], lock[400];
        struct stat st;
        if (strncmp(e->d_name, EXT_RUNDIR_PREFIX, sizeof EXT_RUNDIR_PREFIX - 1) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        snprintf(lock, sizeof lock, "%s/" EXT_RUNDIR_LOCK, path);
        int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            ext_rundir_remove(path);
            log_info(EXT_COMPONENT, "removed %s, the driver run directory of a worker that is gone", path);
        }
        close(fd);
    }
    closedir(dir);
}

static void ext_rt_free(runtime_t *base)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    extdrv_stop(rt->drv);
    if (rt->rundir[0])
        ext_rundir_remove(rt->rundir);
    if (rt->lock_fd >= 0)
        close(rt->lock_fd);
    free(rt);
}

/* ---- the start-up probe --------------------------------------------------- */

/* Creates a probe sandbox of class cls, runs `true` in it and removes it. */
static int ext_probe_class(ext_runtime_t *rt, isolation_t cls, api_error_t *err)
{
    char sbx[SBX_ID_MAX], ref[80] = "", tok[EXTDRV_TOKEN_LEN + 1];
    ext_stream_token(tok);
    snprintf(sbx, sizeof sbx, "probe-%.20s", tok);
    json_object *p = json_object_new_object(), *labels = json_object_new_object();
    jsonx_add_str(p, "sandbox_id", sbx);
    jsonx_add_str(p, "tenant", "");
    jsonx_add_str(p, "class", isolation_name(cls));
    jsonx_add_str(p, "image", "");
    jsonx_add_bool(p, "probe", true);
    jsonx_add_int(p, "cpu_millis", 1000);
    jsonx_add_int(p, "memory_mib", 256);
    jsonx_add_int(p, "disk_mib", 0);
    jsonx_add_str(p, "network", "none");
    jsonx_add(p, "env", json_object_new_object());
    jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_PROBE);
    jsonx_add_str(labels, RUNTIME_LABEL_SANDBOX, sbx);
    if (rt->worker_name[0])
        jsonx_add_str(labels, RUNTIME_LABEL_WORKER, rt->worker_name);
    jsonx_add(p, "labels", labels);
    int r = ext_create(rt, p, EXTDRV_CREATE_MS, ref, NULL, err);
    if (r < 0)
        return r;
    char *argv[] = { "true", NULL };
    exec_spec_t spec = { .argv = argv, .argc = 1, .timeout_seconds = 60 };
    runtime_exec_result_t res;
    r = ext_rt_exec(&rt->base, ref, &spec, 4096, NULL, &res, err);
    if (r == 0 && res.exit_code != 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "`true` in the probe sandbox exited %d%s%.200s", res.exit_code,
                          res.err.len ? ": " : "", res.err.len ? sbuf_cstr(&res.err) : "");
    runtime_exec_result_release(&res);
    api_error_t rerr;
    if (ext_rt_remove(&rt->base, sbx, ref, &rerr) < 0 && r == 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot remove the probe sandbox: %.300s", rerr.message);
    return r;
}

/* Removes the probe sandboxes of this worker a worker killed mid-probe left
 * in the driver (the driver keeps sandboxes across its restarts). */
static void ext_probe_remove_stale(ext_runtime_t *rt)
{
    json_object *res = NULL;
    api_error_t err;
    if (extdrv_call(rt->drv, "inventory", NULL, EXTDRV_QUERY_MS, &res, &err) < 0)
        return;
    json_object *list = jsonx_get_arr(res, "sandboxes");
    for (size_t i = 0; list && i < json_object_array_length(list) && i < SBX_DRIVER_INVENTORY_MAX; i++) {
        json_object *o = json_object_array_get_idx(list, i), *labels = NULL;
        runtime_object_t obj;
        if (extdrv_object_parse(o, &obj, &labels, &err) < 0)
            continue;
        const char *m = jsonx_get_str(labels, RUNTIME_LABEL_MANAGED), *w = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
        bool mine = !rt->worker_name[0] || (w && strcmp(w, rt->worker_name) == 0);
        if (m && strcmp(m, RUNTIME_MANAGED_PROBE) == 0 && mine)
            ext_rt_remove(&rt->base, obj.sandbox_id, obj.ref, &err);
    }
    json_object_put(res);
}

static void ext_discover(ext_runtime_t *rt)
{
    api_error_t err;
    snprintf(rt->net_why, sizeof rt->net_why, "the driver does not provide that network mode for this class");
    if (extdrv_wait_ready(rt->drv, EXT_OPEN_WAIT_MS, &rt->hello, &err) < 0) {
        rt->considered[ISO_MICROVM] = true;
        snprintf(rt->probe[ISO_MICROVM], RUNTIME_PROBE_TEXT_MAX, "not offered: the driver did not start: %.340s",
                 err.message);
        return;
    }
    ext_probe_remove_stale(rt);
    for (int c = 0; c < EXT_CLASSES; c++) {
        if (!rt->hello.offers[c])
            continue;
        rt->considered[c] = true;
        if (!(rt->hello.net_modes[c] & (1u << NET_NONE))) {
            snprintf(rt->probe[c], RUNTIME_PROBE_TEXT_MAX, "not offered: driver %s declares %s without network none",
                     rt->hello.name, isolation_name((isolation_t)c));
            continue;
        }
        /* Once more after a failure: a loaded host's first boot (which may
         * also build the driver's first template) was seen to miss the
         * guest agent's 60 s, and a class not offered at start stays so
         * until the worker restarts. */
        if (ext_probe_class(rt, (isolation_t)c, &err) < 0) {
            log_warn("worker", "isolation %s: the probe failed (%.300s); trying once more",
                     isolation_name((isolation_t)c), err.message);
            if (ext_probe_class(rt, (isolation_t)c, &err) < 0) {
                snprintf(rt->probe[c], RUNTIME_PROBE_TEXT_MAX, "not offered: probe failed: %.340s", err.message);
                continue;
            }
        }
        rt->offered[c] = true;
        rt->net_modes[c] = rt->hello.net_modes[c];
        snprintf(rt->probe[c], RUNTIME_PROBE_TEXT_MAX, "ok: %s %s ran a probe sandbox: %.300s", rt->hello.name,
                 rt->hello.version, rt->hello.probe[c]);
    }
}

static const runtime_ops_t ext_ops;

int runtime_external_open(const runtime_external_options_t *opt, runtime_t **ret, api_error_t *err)
{
    char **argv = NULL, why[300];
    size_t argc = 0;
    int r = runtime_external_parse_command(opt->command, &argv, &argc, why, sizeof why);
    if (r < 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s", why);
    ext_runtime_t *rt = calloc(1, sizeof *rt);
    if (!rt) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    rt->base.ops = &ext_ops;
    rt->lock_fd = -1;
    snprintf(rt->worker_name, sizeof rt->worker_name, "%s", opt->worker_name ? opt->worker_name : "");
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) >= 80)
        tmp = "/tmp";
    ext_rundirs_remove_stale(tmp);
    snprintf(rt->rundir, sizeof rt->rundir, "%s/" EXT_RUNDIR_PREFIX "XXXXXX", tmp);
    char lock[300];
    if (!mkdtemp(rt->rundir) || chmod(rt->rundir, 0700) < 0) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot make the driver's run directory %s: %s", rt->rundir,
                          strerror(errno));
        rt->rundir[0] = '\0';
        goto cleanup;
    }
    snprintf(lock, sizeof lock, "%s/" EXT_RUNDIR_LOCK, rt->rundir);
    rt->lock_fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (rt->lock_fd < 0 || flock(rt->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot lock the driver's run directory %s: %s", rt->rundir,
                          strerror(errno));
        goto cleanup;
    }
    r = extdrv_start((const char *const *)argv, argc, rt->rundir, rt->worker_name, &rt->drv, err);
    if (r < 0)
        goto cleanup;
    ext_discover(rt);
    *ret = &rt->base;
    rt = NULL;
cleanup:
    if (rt) {
        if (rt->rundir[0])
            ext_rundir_remove(rt->rundir);
        if (rt->lock_fd >= 0)
            close(rt->lock_fd);
        free(rt);
    }
    for (size_t i = 0; argv && i < argc; i++)
        free(argv[i]);
    free(argv);
    return r;
}

static const runtime_ops_t ext_ops = {
    .name = RUNTIME_BACKEND_EXTERNAL,
    .ref_prefix = EXTDRV_REF_PREFIX,
    .ping = ext_rt_ping,
    .create = ext_rt_create,
    .exec = ext_rt_exec,
    .remove = ext_rt_remove,
    .check_owner = ext_rt_check_owner,
    .inventory = ext_rt_inventory,
    .images = ext_rt_images,
    .dial = ext_rt_dial,
    .logs_target = ext_rt_logs_target,
    .logs_stream = ext_rt_logs_stream,
    .files_target = ext_rt_files_target,
    .files_put = ext_rt_files_put,
    .files_get = ext_rt_files_get,
    .shell_open = ext_rt_shell_open,
    .shell_resize = ext_rt_shell_resize,
    .shell_exit_code = ext_rt_shell_exit_code,
    .shell_close = ext_rt_shell_close,
    .isolation_classes = ext_rt_isolation_classes,
    .network_modes = ext_rt_network_modes,
    .takes_nic = ext_rt_takes_nic,
    .probe_result = ext_rt_probe_result,
    .network_unavailable = ext_rt_network_unavailable,
    .set_cancel_flag = ext_rt_set_cancel_flag,
    .disk_mode = ext_rt_disk_mode,
    .pause = ext_rt_pause,
    .resume = ext_rt_resume,
    .snapshot_create = ext_rt_snapshot_create,
    .snapshot_list = ext_rt_snapshot_list,
    .snapshot_remove = ext_rt_snapshot_remove,
    .snapshot_export = ext_rt_snapshot_export,
    .snapshot_import = ext_rt_snapshot_import,
    .free = ext_rt_free,
};
