/* sandbox-vmm's snapshots (docs/snapshots.md, microvm): a VM's root disk
 * saved as a standalone qcow2 in <state>/snapshots/<id>/disk.qcow2 with its
 * meta.json (tenant, the worker's labels, image, disk size); a create with
 * "from" boots a new VM over an overlay of it. The guest syncs and the VM
 * is frozen while its disk is read, so the copy is what the guest wrote.
 * With "memory" the VM is saved whole (vmm_state_save: state.mig, the
 * disk as that memory saw it, append, machine.json), and a sandbox from it
 * that fits the saved machine resumes it instead of booting. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "errors.h"
#include "ids.h"
#include "vmmdrv.h"

#define META_MAX (64 * 1024)

static int snap_dir(vmmdrv_t *d, const char *id, char *out, size_t cap)
{
    if (!ids_valid("snp", id) || (size_t)snprintf(out, cap, "%.3000s/snapshots/%s", d->state_dir, id) >= cap)
        return SBX_EINVAL;
    return 0;
}

/* The meta.json of snapshot id, or NULL. */
static json_object *meta_read(vmmdrv_t *d, const char *id)
{
    char dir[VMM_PATH_MAX], path[VMM_PATH_MAX + 16];
    if (snap_dir(d, id, dir, sizeof(dir)) != 0)
        return NULL;
    snprintf(path, sizeof(path), "%s/meta.json", dir);
    return vmmdrv_json_read(path, META_MAX);
}

static json_object *measure(json_object *meta)
{
    json_object *o = json_object_new_object(), *v;
    json_object_object_add(o, "id", json_object_new_string(vmmdrv_str(meta, "id")));
    json_object_object_add(o, "tenant", json_object_new_string(vmmdrv_str(meta, "tenant")));
    json_object_object_add(o, "labels", json_object_object_get_ex(meta, "labels", &v) ? json_object_get(v)
                                                                                       : json_object_new_object());
    json_object_object_add(o, "size_bytes", json_object_new_int64(json_object_object_get_ex(meta, "size_bytes", &v)
                                                                      ? json_object_get_int64(v) : -1));
    json_object_object_add(o, "image_bytes", json_object_new_int64(json_object_object_get_ex(meta, "disk_bytes", &v)
                                                                       ? json_object_get_int64(v) : -1));
    json_object_object_add(o, "memory", json_object_new_boolean(json_object_object_get_ex(meta, "memory", &v) &&
                                                                json_object_get_boolean(v)));
    return o;
}

/* Runs sync in the guest so that what it wrote is on its disk. */
static int guest_sync(vmmdrv_t *d, const char *ref, vmmdrv_call_t *call)
{
    vmmdrv_vm_t *v = vmmdrv_vm_get(d, ref, call);
    if (v == NULL)
        return -1;
    static const char *const argv[] = {"/.sbx/busybox", "sync", NULL};
    vmm_exec_result_t r;
    char why[VMM_WHY_MAX] = "";
    int rc = vmmdrv_guest_run(v->vm, argv, 60000, &r, why);
    vmmdrv_vm_put(d, v, rc != 0);
    if (rc != 0 || r.how != VMM_EXIT_CODE || r.code != 0) {
        vmmdrv_fail(call, "runtime_error", "sync in the guest: %s", rc != 0 ? why : "it failed");
        return -1;
    }
    return 0;
}

/* Removes a snapshot's files, meta.json first (without it the snapshot is
 * not listed any more): NULL, or the name of the one that stayed (errno). */
static const char *snapshot_files_remove(const char *dir)
{
    static const char *const files[] = {"meta.json", "meta.json.tmp", "disk.qcow2", "disk.qcow2.part", "state.mig",
                                        "state.mig.part", "append", "machine.json"};
    char path[VMM_PATH_MAX + 32];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            return files[i];
    }
    return NULL;
}

json_object *vmmdrv_m_snapshot(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *ref = vmmdrv_str(p, "ref"), *id = vmmdrv_str(p, "snapshot_id"), *tenant = vmmdrv_str(p, "tenant");
    char dir[VMM_PATH_MAX], disk[VMM_PATH_MAX + 16], path[VMM_PATH_MAX + 16], why[VMM_WHY_MAX] = "";
    if (snap_dir(d, id, dir, sizeof(dir)) != 0 || !tenant[0] || strlen(tenant) > 63)
        return vmmdrv_fail(call, "invalid_argument", "snapshot needs a snapshot_id (snp_…) and a tenant");
    json_object *rec = vmmdrv_vm_record(d, ref);
    if (rec == NULL)
        return vmmdrv_fail(call, "not_found", "no such sandbox");
    json_object *have = meta_read(d, id);
    if (have != NULL) { /* idempotent: made already */
        json_object *o = strcmp(vmmdrv_str(have, "tenant"), tenant) == 0
                             ? measure(have) : vmmdrv_fail(call, "conflict", "snapshot %s is another's", id);
        json_object_put(have);
        json_object_put(rec);
        return o;
    }
    int frozen = vmm_frozen(&d->cfg, ref);
    if (frozen < 0) {
        json_object_put(rec);
        return vmmdrv_fail(call, "sandbox_exited", "the VM of %s is not running", ref);
    }
    snprintf(path, sizeof(path), "%.3000s/snapshots", d->state_dir);
    mkdir(path, 0711);
    if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
        json_object_put(rec);
        return vmmdrv_fail(call, "runtime_error", "snapshot directory: %s", strerror(errno));
    }
    json_object *mv;
    int memory = json_object_object_get_ex(p, "memory", &mv) && json_object_get_boolean(mv);
    /* a paused VM thaws for its guest's sync and is frozen again */
    int rc = 0, src = 0;
    if (frozen && vmm_freeze(&d->cfg, ref, false, why) != 0)
        rc = -1;
    if (rc == 0 && guest_sync(d, ref, call) != 0)
        rc = -2;
    long long bytes = 0;
    snprintf(disk, sizeof(disk), "%s/disk.qcow2", dir);
    if (rc == 0 && memory) {
        /* the whole machine, with no host traffic on the agent's port meanwhile */
        vmmdrv_vm_t *v = vmmdrv_vm_get(d, ref, call);
        if (v == NULL)
            rc = -2;
        else if ((src = vmm_state_save(&d->cfg, ref, dir, &bytes, why)) != 0)
            rc = -1;
        if (v != NULL)
            vmmdrv_vm_put(d, v, 0);
        if (frozen && vmm_freeze(&d->cfg, ref, true, NULL) != 0 && rc == 0)
            rc = -1;
    } else {
        if (vmm_freeze(&d->cfg, ref, true, why) != 0 && rc == 0)
            rc = -1;
        if (rc == 0 && vmm_disk_save(&d->cfg, ref, disk, &bytes, why) != 0)
            rc = -1;
        if (!frozen)
            vmm_freeze(&d->cfg, ref, false, NULL);
    }
    json_object *meta = NULL;
    if (rc == 0) {
        json_object *v;
        meta = json_object_new_object();
        json_object_object_add(meta, "id", json_object_new_string(id));
        json_object_object_add(meta, "tenant", json_object_new_string(tenant));
        json_object_object_add(meta, "labels", json_object_object_get_ex(p, "labels", &v) &&
                                   json_object_is_type(v, json_type_object) ? json_object_get(v)
                                                                            : json_object_new_object());
        json_object_object_add(meta, "image", json_object_new_string(vmmdrv_str(rec, "image")));
        json_object_object_add(meta, "disk_bytes", json_object_new_int64(
                                   json_object_object_get_ex(rec, "disk_bytes", &v) ? json_object_get_int64(v) : 0));
        json_object_object_add(meta, "size_bytes", json_object_new_int64(bytes));
        json_object_object_add(meta, "memory", json_object_new_boolean(memory));
        json_object_object_add(meta, "source", json_object_new_string(vmmdrv_str(rec, "sandbox_id")));
        json_object_object_add(meta, "created_at", json_object_new_int64((int64_t)time(NULL)));
        const char *text = json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN);
        char tmp[VMM_PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/meta.json", dir);
        snprintf(tmp, sizeof(tmp), "%s/meta.json.tmp", dir);
        FILE *f = fopen(tmp, "we");
        if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
            snprintf(why, sizeof(why), "meta.json: %s", strerror(errno));
            unlink(tmp);
            rc = -1;
        }
    }
    json_object_put(rec);
    if (rc != 0) {
        snapshot_files_remove(dir);
        rmdir(dir);
        json_object_put(meta);
        if (rc == -2)
            return NULL;
        return vmmdrv_fail(call, src == SBX_EINVAL ? "invalid_argument" : src == SBX_EUNAVAIL ? "unavailable"
                                                                                               : "runtime_error",
                           "snapshot of %s: %s", ref, why);
    }
    json_object *o = measure(meta);
    json_object_put(meta);
    return o;
}

json_object *vmmdrv_m_snapshots(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    (void)p;
    (void)call;
    char path[VMM_PATH_MAX];
    snprintf(path, sizeof(path), "%.3000s/snapshots", d->state_dir);
    json_object *arr = json_object_new_array();
    DIR *dd = opendir(path);
    struct dirent *e;
    int n = 0;
    while (dd != NULL && (e = readdir(dd)) != NULL && n < SBX_DRIVER_INVENTORY_MAX) {
        json_object *meta = ids_valid("snp", e->d_name) ? meta_read(d, e->d_name) : NULL;
        if (meta == NULL)
            continue;
        json_object_array_add(arr, measure(meta));
        json_object_put(meta);
        n++;
    }
    if (dd != NULL)
        closedir(dd);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "snapshots", arr);
    return o;
}

json_object *vmmdrv_m_snapshot_remove(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *id = vmmdrv_str(p, "snapshot_id");
    char dir[VMM_PATH_MAX];
    if (snap_dir(d, id, dir, sizeof(dir)) != 0)
        return vmmdrv_fail(call, "invalid_argument", "snapshot_remove needs a snapshot_id (snp_…)");
    if (vmmdrv_vm_uses_snapshot(d, id))
        return vmmdrv_fail(call, "conflict", "a sandbox here still runs from snapshot %s", id);
    const char *bad = snapshot_files_remove(dir);
    if (bad != NULL)
        return vmmdrv_fail(call, "runtime_error", "remove %s: %s", bad, strerror(errno));
    if (rmdir(dir) != 0 && errno != ENOENT)
        return vmmdrv_fail(call, "runtime_error", "remove snapshot %s: %s", id, strerror(errno));
    return json_object_new_object();
}

int vmmdrv_snapshot_disk(vmmdrv_t *d, const char *id, const char *tenant, char *ret_path, size_t cap,
                         uint64_t *ret_disk_bytes, int *ret_memory, vmmdrv_call_t *call)
{
    char dir[VMM_PATH_MAX];
    json_object *meta = snap_dir(d, id, dir, sizeof(dir)) == 0 ? meta_read(d, id) : NULL, *v;
    if (meta == NULL) {
        vmmdrv_fail(call, "not_found", "no snapshot %.64s on this worker's microVM driver", id);
        return -1;
    }
    int ok = strcmp(vmmdrv_str(meta, "tenant"), tenant) == 0;
    int64_t bytes = json_object_object_get_ex(meta, "disk_bytes", &v) ? json_object_get_int64(v) : 0;
    *ret_memory = json_object_object_get_ex(meta, "memory", &v) && json_object_get_boolean(v);
    json_object_put(meta);
    if (!ok) {
        vmmdrv_fail(call, "not_found", "no snapshot %.64s of this tenant here", id);
        return -1;
    }
    if ((size_t)snprintf(ret_path, cap, "%s/disk.qcow2", dir) >= cap || access(ret_path, R_OK) != 0) {
        vmmdrv_fail(call, "runtime_error", "snapshot %s has no disk", id);
        return -1;
    }
    *ret_disk_bytes = bytes > 0 ? (uint64_t)bytes : 0;
    return 0;
}
