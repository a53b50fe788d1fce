/* The runtime interface's dispatchers (each runtime_* call goes through the
 * backend's operations table), the backend-independent releases, and
 * runtime_open, the one place that knows the backends. */
#include "runtime.h"
#include "docker/runtime_docker.h"
#include "external/runtime_external.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opens the Docker backend with its settings from cfg. */
static int runtime_open_docker(const cfg_t *cfg, const char *worker_name, runtime_t **ret, api_error_t *err)
{
    runtime_docker_options_t opt = {
        .socket_path = cfg_str(cfg, CFG_DOCKER_SOCKET),
        .gvisor_runtime = cfg_str(cfg, CFG_WORKER_GVISOR_RUNTIME),
        .restricted_network = cfg_str(cfg, CFG_WORKER_RESTRICTED_NETWORK),
        .open_network = cfg_str(cfg, CFG_WORKER_OPEN_NETWORK),
        .worker_name = worker_name,
        .image_registries = cfg_str(cfg, CFG_IMAGE_REGISTRIES),
        .volume_dir = cfg_str(cfg, CFG_WORKER_VOLUME_DIR),
        .egress_upstream = cfg_str(cfg, CFG_WORKER_EGRESS_UPSTREAM),
        .filtered_network = cfg_str(cfg, CFG_WORKER_FILTERED_NETWORK),
        .egress_filter = cfg_str(cfg, CFG_WORKER_EGRESS_FILTER),
        .egress_upstream_ca = cfg_str(cfg, CFG_WORKER_EGRESS_UPSTREAM_CA),
        .nic_subnet = cfg_str(cfg, CFG_WORKER_NIC_SUBNET),
    };
    return runtime_docker_open(&opt, ret, err);
}

/* Opens the external driver backend with its settings from cfg. */
static int runtime_open_external(const cfg_t *cfg, const char *worker_name, runtime_t **ret, api_error_t *err)
{
    runtime_external_options_t opt = {
        .command = cfg_str(cfg, CFG_WORKER_DRIVER_COMMAND),
        .worker_name = worker_name,
    };
    return runtime_external_open(&opt, ret, err);
}

static const struct {
    const char *name;
    int (*open)(const cfg_t *cfg, const char *worker_name, runtime_t **ret, api_error_t *err);
} runtime_backends[] = {
    { RUNTIME_BACKEND_DOCKER, runtime_open_docker },
    { RUNTIME_BACKEND_EXTERNAL, runtime_open_external },
};

/* Opens the backend named by the n bytes at name. */
static int runtime_open_one(const cfg_t *cfg, const char *name, size_t n, const char *worker_name, runtime_t **ret,
                            api_error_t *err)
{
    for (size_t i = 0; i < sizeof runtime_backends / sizeof runtime_backends[0]; i++)
        if (strlen(runtime_backends[i].name) == n && strncmp(name, runtime_backends[i].name, n) == 0)
            return runtime_backends[i].open(cfg, worker_name, ret, err);
    return api_error_set(err, API_INVALID_ARGUMENT,
                         "worker_runtime must be a list of docker, external (got \"%.*s\")", (int)(n > 64 ? 64 : n),
                         name);
}

int runtime_open(const cfg_t *cfg, const char *worker_name, runtime_t **ret, api_error_t *err)
{
    const char *list = cfg_str(cfg, CFG_WORKER_RUNTIME);
    runtime_t *rts[SBX_RUNTIME_BACKENDS_MAX] = { 0 };
    size_t n = 0;
    int r = 0;
    for (const char *p = list; *p && r == 0;) {
        size_t len = strcspn(p, ",");
        if (n == SBX_RUNTIME_BACKENDS_MAX)
            r = api_error_set(err, API_INVALID_ARGUMENT, "worker_runtime names more than %d backends",
                              SBX_RUNTIME_BACKENDS_MAX);
        else
            r = runtime_open_one(cfg, p, len, worker_name, &rts[n], err);
        if (r == 0)
            n++;
        p += len;
        if (*p == ',')
            p++;
    }
    if (r == 0 && n == 0)
        r = api_error_set(err, API_INVALID_ARGUMENT, "worker_runtime is empty");
    if (r == 0 && n == 1) {
        *ret = rts[0];
        return 0;
    }
    if (r == 0)
        r = runtime_multi_new(rts, n, ret, err);
    for (size_t i = 0; i < n; i++)
        runtime_free(rts[i]); /* NULL once taken */
    return r;
}

int runtime_ping(runtime_t *rt, long timeout_ms, api_error_t *err) { return rt->ops->ping(rt, timeout_ms, err); }

const char *runtime_name(const runtime_t *rt) { return rt->ops->name; }

size_t runtime_isolation_classes(const runtime_t *rt, isolation_t *ret, size_t max)
{
    return rt->ops->isolation_classes(rt, ret, max);
}

unsigned runtime_network_modes(const runtime_t *rt, isolation_t cls) { return rt->ops->network_modes(rt, cls); }

const char *runtime_probe_result(const runtime_t *rt, isolation_t cls) { return rt->ops->probe_result(rt, cls); }

const char *runtime_network_unavailable(const runtime_t *rt, isolation_t cls, net_mode_t mode)
{
    return rt->ops->network_unavailable(rt, cls, mode);
}

int runtime_images(runtime_t *rt, char ***ret, size_t *ret_n, api_error_t *err)
{
    return rt->ops->images(rt, ret, ret_n, err);
}

int runtime_image_details(runtime_t *rt, struct json_object **ret, api_error_t *err)
{
    *ret = NULL;
    if (!rt->ops->image_details)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime keeps no image details", rt->ops->name);
    return rt->ops->image_details(rt, ret, err);
}

void runtime_images_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int runtime_create(runtime_t *rt, const runtime_create_req_t *req, char ret_ref[80], runtime_exit_t *ret_exit,
                   api_error_t *err)
{
    /* Never a fresh sandbox in place of one from a snapshot. */
    if (req->spec && req->spec->from && !rt->ops->snapshot_create)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "the %s runtime cannot start a sandbox from a snapshot (isolation %s)", rt->ops->name,
                             isolation_name(req->isolation));
    /* Never a sandbox without the volumes it asked for (mounted by this
     * backend, or as disks another one claimed: runtime_multi.c). */
    char why[160];
    if (req->spec && req->spec->nvolumes > 0 && req->ndisks != req->spec->nvolumes &&
        !runtime_volume_support(rt, why, sizeof why))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker cannot mount volumes (isolation %s): %s",
                             isolation_name(req->isolation), why);
    return rt->ops->create(rt, req, ret_ref, ret_exit, err);
}

int runtime_snapshot_export(runtime_t *rt, const runtime_snapshot_export_req_t *req, api_error_t *err)
{
    if (!rt->ops->snapshot_export)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime cannot send a snapshot", rt->ops->name);
    return rt->ops->snapshot_export(rt, req, err);
}

int runtime_snapshot_import(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_files_read_fn read, void *ud,
                            runtime_snapshot_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    if (!rt->ops->snapshot_import)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the %s runtime cannot take a snapshot's copy",
                             rt->ops->name);
    return rt->ops->snapshot_import(rt, req, read, ud, ret, err);
}

bool runtime_volume_support(runtime_t *rt, char *why, size_t whylen)
{
    if (!rt->ops->volume_support) {
        snprintf(why, whylen, "the %s runtime has no volumes", rt->ops->name);
        return false;
    }
    return rt->ops->volume_support(rt, why, whylen);
}

int runtime_volume_list(runtime_t *rt, runtime_volume_t **ret, size_t *ret_n, api_error_t *err)
{
    *ret = NULL;
    *ret_n = 0;
    if (!rt->ops->volume_list)
        return 0;
    return rt->ops->volume_list(rt, ret, ret_n, err);
}

int runtime_volume_remove(runtime_t *rt, const char *volume_id, api_error_t *err)
{
    if (!rt->ops->volume_remove)
        return 0;
    return rt->ops->volume_remove(rt, volume_id, err);
}

int runtime_snapshot_image(runtime_t *rt, const runtime_create_req_t *req, char *image, size_t len,
                           api_error_t *err)
{
    if (!rt->ops->snapshot_image || !req->spec || !req->spec->from)
        return api_error_set(err, API_IMAGE_UNAVAILABLE, "the %s runtime holds no snapshot images", rt->ops->name);
    return rt->ops->snapshot_image(rt, req, image, len, err);
}

int runtime_volume_disks(runtime_t *rt, const runtime_create_req_t *req, runtime_disk_t **ret, size_t *ret_n,
                         api_error_t *err)
{
    *ret = NULL;
    *ret_n = 0;
    if (!rt->ops->volume_disks)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the %s runtime cannot hold volumes", rt->ops->name);
    return rt->ops->volume_disks(rt, req, ret, ret_n, err);
}

bool runtime_nic_support(runtime_t *rt, char *why, size_t whylen)
{
    if (rt->ops->nic_support)
        return rt->ops->nic_support(rt, why, whylen);
    snprintf(why, whylen, "the %s runtime filters no NIC", rt->ops->name);
    return false;
}

bool runtime_takes_nic(const runtime_t *rt) { return rt->ops->takes_nic && rt->ops->takes_nic(rt); }

int runtime_nic_attach(runtime_t *rt, const runtime_create_req_t *req, runtime_nic_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    if (!rt->ops->nic_attach)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the %s runtime filters no NIC", rt->ops->name);
    return rt->ops->nic_attach(rt, req, ret, err);
}

int runtime_nic_egress_set(runtime_t *rt, const char *sandbox_id, json_object *egress, api_error_t *err)
{
    if (!rt->ops->nic_egress_set)
        return api_error_set(err, API_CONFLICT, "sandbox %s has no NIC here", sandbox_id);
    return rt->ops->nic_egress_set(rt, sandbox_id, egress, err);
}

void runtime_nic_detach(runtime_t *rt, const char *sandbox_id)
{
    if (rt->ops->nic_detach)
        rt->ops->nic_detach(rt, sandbox_id);
}

void runtime_nic_sweep(runtime_t *rt, const char *const *live, size_t n)
{
    if (rt->ops->nic_sweep)
        rt->ops->nic_sweep(rt, live, n);
}

void runtime_volume_release(runtime_t *rt, const char *sandbox_id)
{
    if (rt->ops->volume_release)
        rt->ops->volume_release(rt, sandbox_id);
}

void runtime_volume_sweep_disks(runtime_t *rt, const char *const *live, size_t n)
{
    if (rt->ops->volume_sweep_disks)
        rt->ops->volume_sweep_disks(rt, live, n);
}

int runtime_pause(runtime_t *rt, const char *ref, bool *ret_memory, api_error_t *err)
{
    *ret_memory = false;
    if (!rt->ops->pause)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime cannot pause a sandbox", rt->ops->name);
    return rt->ops->pause(rt, ref, ret_memory, err);
}

int runtime_resume(runtime_t *rt, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                   api_error_t *err)
{
    if (!rt->ops->resume)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime cannot resume a sandbox", rt->ops->name);
    return rt->ops->resume(rt, sandbox_id, ref, ret_exit, err);
}

int runtime_egress_set(runtime_t *rt, const char *sandbox_id, const char *ref, json_object *egress,
                       api_error_t *err)
{
    if (!rt->ops->egress_set)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the %s runtime filters no egress by name",
                             rt->ops->name);
    return rt->ops->egress_set(rt, sandbox_id, ref, egress, err);
}

int runtime_egress_drain(runtime_t *rt, int max, json_object **ret, int64_t *ret_dropped, api_error_t *err)
{
    *ret = NULL;
    *ret_dropped = 0;
    if (!rt->ops->egress_drain)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the %s runtime filters no egress by name",
                             rt->ops->name);
    return rt->ops->egress_drain(rt, max, ret, ret_dropped, err);
}

int runtime_snapshot_create(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                            api_error_t *err)
{
    if (!rt->ops->snapshot_create)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime keeps no snapshots", rt->ops->name);
    return rt->ops->snapshot_create(rt, req, ret, err);
}

int runtime_snapshot_list(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_snapshot_t **ret,
                          size_t *ret_n, api_error_t *err)
{
    *ret = NULL;
    *ret_n = 0;
    if (!rt->ops->snapshot_list)
        return 0;
    return rt->ops->snapshot_list(rt, cluster_id, worker_name, ret, ret_n, err);
}

int runtime_snapshot_remove(runtime_t *rt, const char *snapshot_id, const char *worker_name, api_error_t *err)
{
    if (!rt->ops->snapshot_remove)
        return 0;
    return rt->ops->snapshot_remove(rt, snapshot_id, worker_name, err);
}

int runtime_exec(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                 const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err)
{
    /* never as root in place of the user asked for */
    if (spec && spec->user && !rt->ops->exec_user)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "the %s runtime cannot run an exec as user %s",
                             rt->ops->name, spec->user);
    return rt->ops->exec(rt, ref, spec, max_output, sink, ret, err);
}

void runtime_exec_result_release(runtime_exec_result_t *r)
{
    if (!r)
        return;
    sbuf_release(&r->out);
    sbuf_release(&r->err);
}

void runtime_exit_release(runtime_exit_t *e)
{
    if (!e)
        return;
    free(e->output_tail);
    e->output_tail = NULL;
}

int runtime_check_owner(runtime_t *rt, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                        api_error_t *err)
{
    return rt->ops->check_owner(rt, who, ref, ret_ref, err);
}

int runtime_remove(runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err)
{
    return rt->ops->remove(rt, sandbox_id, ref, err);
}

int runtime_inventory(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                      size_t *ret_n, api_error_t *err)
{
    return rt->ops->inventory(rt, cluster_id, worker_name, ret, ret_n, err);
}

void runtime_inventory_free(runtime_object_t *objs, size_t n)
{
    for (size_t i = 0; objs && i < n; i++)
        runtime_exit_release(&objs[i].exit);
    free(objs);
}

int runtime_dial(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    return rt->ops->dial(rt, req, ret_fd, err);
}

int runtime_logs_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                        api_error_t *err)
{
    return rt->ops->logs_target(rt, sandbox_id, worker_name, ret_ref, err);
}

int runtime_logs_stream(runtime_t *rt, const char *ref, const runtime_logs_req_t *req, api_error_t *err)
{
    return rt->ops->logs_stream(rt, ref, req, err);
}

int runtime_files_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                         int64_t *ret_fs_bytes, api_error_t *err)
{
    if (ret_fs_bytes)
        *ret_fs_bytes = 0;
    if (rt->ops->files_target)
        return rt->ops->files_target(rt, sandbox_id, worker_name, ret_ref, ret_fs_bytes, err);
    return rt->ops->logs_target(rt, sandbox_id, worker_name, ret_ref, err);
}

int runtime_files_put(runtime_t *rt, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err)
{
    *ret_bytes = 0;
    if (!rt->ops->files_put)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime cannot move files", rt->ops->name);
    return rt->ops->files_put(rt, req, ret_bytes, err);
}

int runtime_files_get(runtime_t *rt, const runtime_files_get_req_t *req, api_error_t *err)
{
    if (!rt->ops->files_get)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime cannot move files", rt->ops->name);
    return rt->ops->files_get(rt, req, err);
}

int runtime_shell_open(runtime_t *rt, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                       runtime_shell_early_t *ret_early, api_error_t *err)
{
    *ret = NULL;
    *ret_fd = -1;
    ret_early->data = NULL;
    ret_early->len = 0;
    if (!rt->ops->shell_open)
        return api_error_set(err, API_UNAVAILABLE, "the %s runtime has no interactive shells", rt->ops->name);
    return rt->ops->shell_open(rt, req, ret, ret_fd, ret_early, err);
}

int runtime_shell_resize(runtime_t *rt, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err)
{
    return rt->ops->shell_resize(rt, s, cols, rows, err);
}

int runtime_shell_exit_code(runtime_t *rt, runtime_shell_t *s, int *ret_code, api_error_t *err)
{
    return rt->ops->shell_exit_code(rt, s, ret_code, err);
}

int runtime_shell_mux_push(runtime_shell_mux_t *m, const char *p, size_t n,
                           int (*emit)(void *ud, int stream, const char *p, size_t n), void *ud)
{
    while (n > 0) {
        if (m->left == 0) {
            size_t k = sizeof m->hdr - m->hdr_len;
            k = k < n ? k : n;
            memcpy(m->hdr + m->hdr_len, p, k);
            m->hdr_len += k;
            p += k;
            n -= k;
            if (m->hdr_len < sizeof m->hdr)
                break;
            m->hdr_len = 0;
            m->left = (uint32_t)m->hdr[4] << 24 | (uint32_t)m->hdr[5] << 16 | (uint32_t)m->hdr[6] << 8 | m->hdr[7];
            m->stream = m->hdr[0];
            continue;
        }
        size_t k = m->left < n ? m->left : n;
        if (m->stream == 1 || m->stream == 2) {
            int r = emit(ud, m->stream, p, k);
            if (r < 0)
                return r;
        }
        m->left -= (uint32_t)k;
        p += k;
        n -= k;
    }
    return 0;
}

void runtime_shell_close(runtime_t *rt, runtime_shell_t *s)
{
    if (s)
        rt->ops->shell_close(rt, s);
}

void runtime_set_cancel_flag(runtime_t *rt, const atomic_int *flag) { rt->ops->set_cancel_flag(rt, flag); }

const char *runtime_disk_mode(const runtime_t *rt)
{
    return rt->ops->disk_mode ? rt->ops->disk_mode(rt) : "not enforced: the runtime has no disk watch";
}

int runtime_disk_enforce(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_disk_stop_t *ret,
                         size_t max, size_t *ret_n, api_error_t *err)
{
    *ret_n = 0;
    if (!rt->ops->disk_enforce)
        return 0;
    return rt->ops->disk_enforce(rt, cluster_id, worker_name, ret, max, ret_n, err);
}

void runtime_free(runtime_t *rt)
{
    if (rt)
        rt->ops->free(rt);
}
