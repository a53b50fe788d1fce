/* sandbox-vmm's sandboxes: a record per sandbox in <state>/sandboxes/REF.json
 * (sandbox id, tenant, labels, env, image: what inventory reports after a
 * driver restart), the VM itself under <state>/vms/REF (worker/vmm), and the
 * shared, locked connection to each VM's agent. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "limits.h"
#include "vmmdrv.h"

#define ATTACH_MS      15000
#define RECORD_MAX     (256 * 1024)
#define IMAGES_MAX     64

static char images[IMAGES_MAX][256]; /* names exported by this process, for `images` */

static int ref_ok(const char *r)
{
    size_t n = r ? strlen(r) : 0;
    if (n == 0 || n >= VMM_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = r[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

static int record_path(vmmdrv_t *d, const char *ref, char *out, size_t cap)
{
    if (!ref_ok(ref) || (size_t)snprintf(out, cap, "%.3000s/sandboxes/%s.json", d->state_dir, ref) >= cap)
        return SBX_EINVAL;
    return 0;
}

json_object *vmmdrv_json_read(const char *path, size_t max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *buf = malloc(max);
    ssize_t n = buf ? read(fd, buf, max - 1) : -1;
    close(fd);
    json_object *o = NULL;
    if (n > 0) {
        buf[n] = '\0';
        o = json_tokener_parse(buf);
    }
    free(buf);
    if (o != NULL && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

int vmmdrv_guest_run(vmm_t *vm, const char *const *argv, long timeout_ms, vmm_exec_result_t *ret, char *why)
{
    static const char *const env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    vmm_exec_req_t req = {.stdin_fd = -1, .max_output = 512, .timeout_ms = timeout_ms};
    uint32_t n = 0;
    while (argv[n] != NULL)
        n++;
    req.cmd.argv = argv;
    req.cmd.argc = n;
    req.cmd.env = env;
    req.cmd.envc = 1;
    req.cmd.cwd = "/";
    return vmm_exec(vm, &req, ret, why);
}

/* The record of ref, or NULL. */
static json_object *record_read(vmmdrv_t *d, const char *ref)
{
    char path[VMM_PATH_MAX];
    if (record_path(d, ref, path, sizeof(path)) != 0)
        return NULL;
    return vmmdrv_json_read(path, RECORD_MAX);
}

static int record_write(vmmdrv_t *d, const char *ref, json_object *rec)
{
    char path[VMM_PATH_MAX], tmp[VMM_PATH_MAX + 8];
    if (record_path(d, ref, path, sizeof(path)) != 0)
        return SBX_EINVAL;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    const char *s = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return SBX_EIO;
    size_t n = strlen(s);
    int ok = write(fd, s, n) == (ssize_t)n && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return SBX_EIO;
    }
    return 0;
}

const char *vmmdrv_str(json_object *rec, const char *key)
{
    json_object *v;
    return rec && json_object_object_get_ex(rec, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v) : "";
}

/* Calls fn for each record (ref, rec) until it returns nonzero; returns that. */
static int records_each(vmmdrv_t *d, int (*fn)(void *arg, const char *ref, json_object *rec), void *arg)
{
    char dir[VMM_PATH_MAX];
    snprintf(dir, sizeof(dir), "%.3000s/sandboxes", d->state_dir);
    DIR *dd = opendir(dir);
    struct dirent *e;
    int rc = 0, count = 0;
    while (rc == 0 && dd != NULL && (e = readdir(dd)) != NULL && count < SBX_DRIVER_INVENTORY_MAX) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0 || n - 5 >= VMM_ID_MAX)
            continue;
        char ref[VMM_ID_MAX];
        snprintf(ref, sizeof(ref), "%.*s", (int)(n - 5), e->d_name);
        json_object *rec = record_read(d, ref);
        if (rec == NULL)
            continue;
        count++;
        rc = fn(arg, ref, rec);
        json_object_put(rec);
    }
    if (dd != NULL)
        closedir(dd);
    return rc;
}

static int vm_running(vmmdrv_t *d, const char *ref)
{
    vmm_info_t *l = NULL;
    size_t n = 0;
    int running = 0;
    if (vmm_list(&d->cfg, &l, &n) != 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i].id, ref) == 0)
            running = l[i].running;
    free(l);
    return running;
}

/* ---- the connection registry ---- */

vmmdrv_vm_t *vmmdrv_vm_get(vmmdrv_t *d, const char *ref, vmmdrv_call_t *call)
{
    if (!ref_ok(ref)) {
        vmmdrv_fail(call, "not_found", "no such sandbox (bad ref)");
        return NULL;
    }
    pthread_mutex_lock(&d->mu);
    vmmdrv_vm_t *v = d->vms;
    while (v != NULL && strcmp(v->id, ref) != 0)
        v = v->next;
    if (v == NULL && (v = calloc(1, sizeof(*v))) != NULL) {
        snprintf(v->id, sizeof(v->id), "%s", ref);
        pthread_mutex_init(&v->mu, NULL);
        v->next = d->vms;
        d->vms = v;
    }
    if (v != NULL)
        v->refs++;
    pthread_mutex_unlock(&d->mu);
    if (v == NULL) {
        vmmdrv_fail(call, "runtime_error", "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&v->mu);
    if (v->vm == NULL && !v->dead) {
        json_object *rec = record_read(d, ref);
        int known = rec != NULL;
        char why[VMM_WHY_MAX] = "";
        int rc = !known ? SBX_ENOTFOUND : vmm_attach(&d->cfg, ref, ATTACH_MS, &v->vm, why);
        json_object_put(rec);
        if (rc != 0) {
            v->vm = NULL;
            vmmdrv_vm_put(d, v, 0);
            if (!known)
                vmmdrv_fail(call, "not_found", "no such sandbox %s", ref);
            else if (rc == SBX_ENOTFOUND)
                vmmdrv_fail(call, "sandbox_exited", "the VM of %s is not running", ref);
            else
                vmmdrv_fail(call, "runtime_error", "attach to VM %s: %s", ref, why);
            return NULL;
        }
    }
    if (v->dead) {
        vmmdrv_vm_put(d, v, 0);
        vmmdrv_fail(call, "not_found", "sandbox %s was removed", ref);
        return NULL;
    }
    return v;
}

void vmmdrv_vm_put(vmmdrv_t *d, vmmdrv_vm_t *v, int broken)
{
    if (broken && v->vm != NULL) {
        vmm_detach(v->vm);
        v->vm = NULL;
    }
    pthread_mutex_unlock(&v->mu);
    pthread_mutex_lock(&d->mu);
    int last = --v->refs == 0;
    if (last) {
        for (vmmdrv_vm_t **pp = &d->vms; *pp; pp = &(*pp)->next) {
            if (*pp == v) {
                *pp = v->next;
                break;
            }
        }
    }
    pthread_mutex_unlock(&d->mu);
    if (last) { /* nobody uses it: the connection closes (the VM runs on) */
        vmm_detach(v->vm);
        pthread_mutex_destroy(&v->mu);
        free(v);
    }
}

void vmmdrv_strv_free(char **v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        free(v[i]);
    free(v);
}

char **vmmdrv_vm_env(vmmdrv_t *d, const char *ref, size_t *ret_n, char *ret_workdir, size_t wdcap)
{
    json_object *rec = record_read(d, ref), *env;
    *ret_n = 0;
    if (ret_workdir != NULL && wdcap > 0)
        snprintf(ret_workdir, wdcap, "%s", vmmdrv_str(rec, "workdir"));
    if (rec == NULL || !json_object_object_get_ex(rec, "env", &env) || !json_object_is_type(env, json_type_object)) {
        json_object_put(rec);
        return NULL;
    }
    size_t cap = (size_t)json_object_object_length(env), n = 0;
    char **out = calloc(cap + 1, sizeof(*out));
    json_object_object_foreach(env, k, val) {
        if (out == NULL || n >= cap || !json_object_is_type(val, json_type_string))
            continue;
        size_t len = strlen(k) + strlen(json_object_get_string(val)) + 2;
        if ((out[n] = malloc(len)) != NULL)
            snprintf(out[n++], len, "%s=%s", k, json_object_get_string(val));
    }
    json_object_put(rec);
    *ret_n = n;
    return out;
}

/* ---- sweeping ---- */

void vmmdrv_vm_sweep(vmmdrv_t *d)
{
    vmm_info_t *l = NULL;
    size_t n = 0;
    if (vmm_list(&d->cfg, &l, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        json_object *rec = record_read(d, l[i].id);
        if (rec == NULL) {
            char why[VMM_WHY_MAX] = "";
            fprintf(stderr, "sandbox-vmm: VM %s has no sandbox record (a create cut short): destroyed\n", l[i].id);
            if (vmm_destroy(&d->cfg, l[i].id, why) != 0)
                fprintf(stderr, "sandbox-vmm: destroy %s: %s\n", l[i].id, why);
        } else if (vmm_frozen(&d->cfg, l[i].id) == 0) {
            /* a driver that died within a memory snapshot left the guest
             * stopped by the migration: it goes on (paused VMs are frozen
             * by signal instead, and stay so) */
            char why[VMM_WHY_MAX] = "";
            if (vmm_guest_continue(&d->cfg, l[i].id, why) != 0)
                fprintf(stderr, "sandbox-vmm: let VM %s go on: %s\n", l[i].id, why);
        }
        json_object_put(rec);
    }
    free(l);
    /* private disks whose sandbox is gone (removed while the driver was down) */
    char dir[VMM_PATH_MAX];
    snprintf(dir, sizeof(dir), "%.3000s/private", d->state_dir);
    DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd != NULL && (e = readdir(dd)) != NULL) {
        size_t len = strlen(e->d_name);
        char ref[VMM_ID_MAX], path[VMM_PATH_MAX];
        if (len < 6 || len - 5 >= sizeof(ref) || strcmp(e->d_name + len - 5, ".ext4") != 0)
            continue;
        snprintf(ref, sizeof(ref), "%.*s", (int)(len - 5), e->d_name);
        json_object *rec = ref_ok(ref) ? record_read(d, ref) : NULL;
        if (rec == NULL) {
            snprintf(path, sizeof(path), "%.3000s/%.200s", dir, e->d_name);
            fprintf(stderr, "sandbox-vmm: private disk %s has no sandbox: removed\n", e->d_name);
            unlink(path);
        }
        json_object_put(rec);
    }
    if (dd != NULL)
        closedir(dd);
}

json_object *vmmdrv_vm_record(vmmdrv_t *d, const char *ref)
{
    return ref_ok(ref) ? record_read(d, ref) : NULL;
}

static int from_cb(void *arg, const char *ref, json_object *rec)
{
    (void)ref;
    return strcmp(vmmdrv_str(rec, "from"), (const char *)arg) == 0;
}

int vmmdrv_vm_uses_snapshot(vmmdrv_t *d, const char *id)
{
    return records_each(d, from_cb, (void *)id);
}

/* ---- methods ---- */

static json_object *sandbox_obj(vmmdrv_t *d, const char *ref, json_object *rec)
{
    json_object *o = json_object_new_object(), *labels;
    json_object_object_add(o, "ref", json_object_new_string(ref));
    json_object_object_add(o, "sandbox_id", json_object_new_string(vmmdrv_str(rec, "sandbox_id")));
    json_object_object_add(o, "tenant", json_object_new_string(vmmdrv_str(rec, "tenant")));
    json_object_object_add(o, "labels", json_object_object_get_ex(rec, "labels", &labels) ? json_object_get(labels)
                                                                                          : json_object_new_object());
    int running = vm_running(d, ref);
    json_object_object_add(o, "state", json_object_new_string(running ? "running" : "exited"));
    json_object_object_add(o, "accel", json_object_new_string(vmmdrv_str(rec, "accel")));
    if (!running) {
        json_object *ex = json_object_new_object();
        json_object_object_add(ex, "exit_code", json_object_new_int(137));
        json_object_object_add(ex, "oom_killed", json_object_new_boolean(0));
        json_object_object_add(ex, "finished_at", json_object_new_string(""));
        json_object_object_add(ex, "error", json_object_new_string("the VM's QEMU is not running"));
        json_object_object_add(o, "exit", ex);
    }
    return o;
}

typedef struct {
    const char *sandbox_id;
    char ref[VMM_ID_MAX];
} find_t;

static int find_cb(void *arg, const char *ref, json_object *rec)
{
    find_t *f = arg;
    if (strcmp(vmmdrv_str(rec, "sandbox_id"), f->sandbox_id) != 0)
        return 0;
    snprintf(f->ref, sizeof(f->ref), "%s", ref);
    return 1;
}

/* The ref a request names (ref, or sandbox_id looked up); "" when none. */
static void ref_of(vmmdrv_t *d, json_object *p, char *out)
{
    json_object *v;
    out[0] = '\0';
    if (json_object_object_get_ex(p, "ref", &v) && json_object_is_type(v, json_type_string)) {
        snprintf(out, VMM_ID_MAX, "%s", ref_ok(json_object_get_string(v)) ? json_object_get_string(v) : "");
        return;
    }
    if (json_object_object_get_ex(p, "sandbox_id", &v) && json_object_is_type(v, json_type_string)) {
        find_t f = {.sandbox_id = json_object_get_string(v)};
        if (records_each(d, find_cb, &f))
            snprintf(out, VMM_ID_MAX, "%s", f.ref);
    }
}

json_object *vmmdrv_m_inspect(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    char ref[VMM_ID_MAX];
    ref_of(d, p, ref);
    json_object *rec = ref[0] ? record_read(d, ref) : NULL;
    if (rec == NULL)
        return vmmdrv_fail(call, "not_found", "no such sandbox");
    json_object *o = sandbox_obj(d, ref, rec);
    json_object_put(rec);
    return o;
}

static int inv_cb(void *arg, const char *ref, json_object *rec)
{
    json_object **a = arg;
    json_object_array_add(a[1], sandbox_obj((vmmdrv_t *)a[0], ref, rec));
    return 0;
}

json_object *vmmdrv_m_inventory(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    (void)p;
    (void)call;
    json_object *arr = json_object_new_array();
    json_object *a[2] = {(json_object *)d, arr};
    records_each(d, inv_cb, a);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "sandboxes", arr);
    return o;
}

json_object *vmmdrv_m_images(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    (void)p;
    (void)call;
    json_object *arr = json_object_new_array();
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < IMAGES_MAX && images[i][0]; i++)
        json_object_array_add(arr, json_object_new_string(images[i]));
    pthread_mutex_unlock(&d->mu);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "images", arr);
    return o;
}

/* <state>/private/<ref>.ext4: the base disk of a VM whose image is a
 * tenant's snapshot (never cached, never shared, gone with the VM). */
static void private_path(vmmdrv_t *d, const char *ref, char *out, size_t cap)
{
    snprintf(out, cap, "%.3000s/private/%.64s.ext4", d->state_dir, ref);
}

/* Stops the VM of ref and removes all of it; the record last. */
static int destroy(vmmdrv_t *d, const char *ref, char *why)
{
    pthread_mutex_lock(&d->mu);
    for (vmmdrv_vm_t *v = d->vms; v; v = v->next)
        if (strcmp(v->id, ref) == 0)
            v->dead = 1;
    pthread_mutex_unlock(&d->mu);
    int rc = vmm_destroy(&d->cfg, ref, why);
    char path[VMM_PATH_MAX];
    if (rc == 0) {
        private_path(d, ref, path, sizeof(path));
        if (unlink(path) != 0 && errno != ENOENT)
            rc = SBX_EIO;
    }
    if (rc == 0 && record_path(d, ref, path, sizeof(path)) == 0 && unlink(path) != 0 && errno != ENOENT)
        rc = SBX_EIO;
    return rc;
}

json_object *vmmdrv_m_remove(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    char ref[VMM_ID_MAX], why[VMM_WHY_MAX] = "";
    ref_of(d, p, ref);
    if (ref[0] && destroy(d, ref, why) != 0)
        return vmmdrv_fail(call, "runtime_error", "remove %s: %s", ref, why);
    return json_object_new_object();
}

static json_object *freeze(vmmdrv_t *d, json_object *p, bool frozen, vmmdrv_call_t *call)
{
    char ref[VMM_ID_MAX], why[VMM_WHY_MAX] = "";
    ref_of(d, p, ref);
    if (!ref[0])
        return vmmdrv_fail(call, "not_found", "no such sandbox");
    int rc = vmm_freeze(&d->cfg, ref, frozen, why);
    if (rc == SBX_ENOTFOUND)
        return vmmdrv_fail(call, "not_found", "%s", why);
    if (rc != 0)
        return vmmdrv_fail(call, "runtime_error", "%s %s: %s", frozen ? "pause" : "resume", ref, why);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "memory", json_object_new_boolean(1));
    return o;
}

json_object *vmmdrv_m_pause(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call) { return freeze(d, p, true, call); }
json_object *vmmdrv_m_resume(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call) { return freeze(d, p, false, call); }

typedef struct {
    const char *image;
    unsigned vcpus, memory_mb;
    uint64_t disk_bytes;
    char from[VMM_PATH_MAX];         /* "": none; else a snapshot's disk (backing) */
    int from_memory;                 /* that snapshot saved the VM's memory too */
    int restored;                    /* out: the VM resumed that memory */
    int private_image;               /* the image is a tenant's snapshot: a disk of this VM alone */
    vmm_disk_t disks[VMM_DISKS_MAX]; /* volumes, open; want_close */
    const char *targets[VMM_DISKS_MAX];
    unsigned ndisks;
    vmm_nic_t nic;                   /* nic.fd >= 0: a NIC on the tap the worker named (want_close) */
} want_t;

static void want_close(want_t *w)
{
    for (unsigned i = 0; i < w->ndisks; i++)
        if (w->disks[i].fd >= 0)
            close(w->disks[i].fd);
    w->ndisks = 0;
    if (w->nic.fd >= 0)
        close(w->nic.fd);
    w->nic.fd = -1;
}

/* The create's nic ({"tap","host","guest","prefix"}: the worker's egress
 * filter takes that tap's traffic, docs/network.md): the tap, made now.
 * 0 without one. */
static int want_nic(json_object *p, want_t *w, vmmdrv_call_t *call)
{
    json_object *n, *v;
    w->nic.fd = -1;
    if (!json_object_object_get_ex(p, "nic", &n) || json_object_is_type(n, json_type_null))
        return 0;
    const char *tap = json_object_is_type(n, json_type_object) ? vmmdrv_str(n, "tap") : "";
    const char *host = json_object_is_type(n, json_type_object) ? vmmdrv_str(n, "host") : "";
    const char *guest = json_object_is_type(n, json_type_object) ? vmmdrv_str(n, "guest") : "";
    int64_t prefix = json_object_is_type(n, json_type_object) && json_object_object_get_ex(n, "prefix", &v)
                         ? json_object_get_int64(v) : 0;
    if (!vmm_tap_name_ok(tap) || strlen(host) >= sizeof(w->nic.gateway) || strlen(guest) >= sizeof(w->nic.guest) ||
        prefix < 8 || prefix > 30) {
        vmmdrv_fail(call, "invalid_argument", "nic: {tap: [a-z0-9] of at most %d, host and guest IPv4 addresses, "
                    "prefix 8..30}", IFNAMSIZ - 1);
        return -1;
    }
    snprintf(w->nic.gateway, sizeof(w->nic.gateway), "%s", host);
    snprintf(w->nic.guest, sizeof(w->nic.guest), "%s", guest);
    w->nic.prefix = (unsigned)prefix;
    char why[VMM_WHY_MAX] = "";
    int fd = -1;
    if (vmm_tap_open(tap, host, (unsigned)prefix, &fd, why) != 0) {
        vmmdrv_fail(call, "runtime_error", "nic: %s", why);
        return -1;
    }
    w->nic.fd = fd;
    return 0;
}

/* Mounts each data disk at its target in the just booted guest (found by
 * its serial, sbxvol<N>), as the container class binds a volume. */
static int mount_disks(vmm_t *vm, const want_t *w, vmmdrv_call_t *call)
{
    static const char *const script =
        "B=/.sbx/busybox; dev=; for d in /sys/block/vd*; do"
        " [ \"$($B cat \"$d/serial\" 2>/dev/null)\" = \"$1\" ] && dev=/dev/${d##*/}; done;"
        " [ -n \"$dev\" ] || { echo \"no disk with serial $1\" >&2; exit 2; };"
        " $B mkdir -p -- \"$2\" && $B mount -t ext4 -o \"$3\" \"$dev\" \"$2\"";
    for (unsigned i = 0; i < w->ndisks; i++) {
        char serial[24];
        snprintf(serial, sizeof(serial), "sbxvol%u", i);
        const char *argv[] = {"/.sbx/busybox", "sh", "-c", script, "sh", serial, w->targets[i],
                              w->disks[i].read_only ? "ro,noload,nosuid,nodev" : "rw,nosuid,nodev", NULL};
        vmm_exec_result_t r;
        char why[VMM_WHY_MAX] = "";
        if (vmmdrv_guest_run(vm, argv, 30000, &r, why) != 0) {
            vmmdrv_fail(call, "runtime_error", "mount volume at %.300s: %s", w->targets[i], why);
            return -1;
        }
        if (r.how != VMM_EXIT_CODE || r.code != 0) {
            vmmdrv_fail(call, "runtime_error", "mount volume at %.300s in the guest failed (exit %d; its console "
                        "log says more)", w->targets[i], r.code);
            return -1;
        }
    }
    return 0;
}

/* Exports the image from Docker and makes its base disk (ref's own when
 * the image is private). */
static int base_disk(vmmdrv_t *d, const char *ref, const want_t *w, char *base, vmmdrv_call_t *call)
{
    char tmpl[VMM_PATH_MAX], iid[80], why[VMM_WHY_MAX] = "";
    snprintf(tmpl, sizeof(tmpl), "%.3000s/export.XXXXXX", d->state_dir);
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0) {
        vmmdrv_fail(call, "runtime_error", "export file: %s", strerror(errno));
        return -1;
    }
    unlink(tmpl);
    int rc = vmm_docker_export(d->docker_sock, w->image, fd, iid, why);
    if (rc != 0) {
        close(fd);
        vmmdrv_fail(call, "image_unavailable", "image %s: %s", w->image, why);
        return -1;
    }
    lseek(fd, 0, SEEK_SET);
    if (w->private_image) {
        char dir[VMM_PATH_MAX];
        snprintf(dir, sizeof(dir), "%.3000s/private", d->state_dir);
        mkdir(dir, 0711);
        private_path(d, ref, base, VMM_PATH_MAX);
        rc = vmm_image_prepare_private(&d->cfg, fd, w->disk_bytes, base, why);
        close(fd);
        if (rc != 0) {
            unlink(base);
            vmmdrv_fail(call, "runtime_error", "root disk of %s: %s", w->image, why);
            return -1;
        }
        return 0; /* not listed among the images either */
    }
    rc = vmm_image_prepare(&d->cfg, iid, fd, w->disk_bytes, base, VMM_PATH_MAX, why);
    close(fd);
    if (rc != 0) {
        vmmdrv_fail(call, "runtime_error", "root disk of %s: %s", w->image, why);
        return -1;
    }
    pthread_mutex_lock(&d->mu);
    int i = 0;
    while (i < IMAGES_MAX - 1 && images[i][0] && strcmp(images[i], w->image) != 0)
        i++;
    snprintf(images[i], sizeof(images[i]), "%s", w->image);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* Boots ref from the image's template (made at first use), else cold; a
 * sandbox from a snapshot boots over that snapshot's disk. */
static int boot(vmmdrv_t *d, const char *ref, want_t *w, vmm_t **ret_vm, vmmdrv_call_t *call)
{
    char base[VMM_PATH_MAX], tdir[VMM_PATH_MAX], why[VMM_WHY_MAX] = "";
    if (w->from[0]) {
        vmm_spec_t spec = {.id = ref, .base_disk = w->from, .backing = w->from, .disk_bytes = w->disk_bytes,
                           .vcpus = w->vcpus, .memory_mb = w->memory_mb, .disks = w->disks, .ndisks = w->ndisks,
                           .nic = w->nic.fd >= 0 ? &w->nic : NULL};
        /* a snapshot with memory resumes where its VM was, when this VM is
         * that machine (never with a NIC: its guest would keep the address
         * of the VM it was made from) */
        char *slash = strrchr(w->from, '/');
        if (w->from_memory && slash != NULL && spec.nic != NULL) {
            fprintf(stderr, "sandbox-vmm: %s boots from its snapshot's disk, not its memory: it has a NIC\n", ref);
        } else if (w->from_memory && slash != NULL) {
            vmm_spec_t rs = spec;
            snprintf(tdir, sizeof(tdir), "%.*s", (int)(slash - w->from), w->from);
            rs.template_dir = tdir;
            if (!vmm_state_fits(&d->cfg, tdir, &rs, why))
                fprintf(stderr, "sandbox-vmm: %s boots from its snapshot's disk, not its memory: %s\n", ref, why);
            else if (vmm_boot(&d->cfg, &rs, ret_vm, why) == 0) {
                w->restored = 1;
                return 0;
            } else {
                fprintf(stderr, "sandbox-vmm: restore of %s from its snapshot's memory failed (%s): boots\n", ref,
                        why);
                vmm_destroy(&d->cfg, ref, NULL);
            }
        }
        if (vmm_boot(&d->cfg, &spec, ret_vm, why) != 0) {
            vmmdrv_fail(call, "runtime_error", "boot: %s", why);
            return -1;
        }
        return 0;
    }
    pthread_mutex_lock(&d->build_mu);
    if (base_disk(d, ref, w, base, call) != 0) {
        pthread_mutex_unlock(&d->build_mu);
        return -1;
    }
    vmm_spec_t spec = {.id = ref, .base_disk = base, .disk_bytes = w->disk_bytes, .vcpus = w->vcpus,
                       .memory_mb = w->memory_mb, .disks = w->disks, .ndisks = w->ndisks,
                       .nic = w->nic.fd >= 0 ? &w->nic : NULL};
    /* a restored machine cannot gain the volumes' disks or a NIC: those
     * boot cold; so does a private image's VM (no template keeps its files) */
    if (w->ndisks > 0 || w->private_image || spec.nic != NULL)
        ;
    else if (vmm_template_ensure(&d->cfg, &spec, tdir, sizeof(tdir), why) == 0)
        spec.template_dir = tdir;
    else
        fprintf(stderr, "sandbox-vmm: no template (%s): cold boot\n", why);
    pthread_mutex_unlock(&d->build_mu);
    int rc = vmm_boot(&d->cfg, &spec, ret_vm, why);
    if (rc != 0 && spec.template_dir != NULL) {
        fprintf(stderr, "sandbox-vmm: restore of %s failed (%s): cold boot\n", ref, why);
        spec.template_dir = NULL;
        vmm_destroy(&d->cfg, ref, why);
        rc = vmm_boot(&d->cfg, &spec, ret_vm, why);
    }
    if (rc != 0) {
        vmmdrv_fail(call, "runtime_error", "boot: %s", why);
        return -1;
    }
    return 0;
}

/* Reads the create's sizes and image; NULL with call's error when refused. */
static int want_of(vmmdrv_t *d, json_object *p, want_t *w, vmmdrv_call_t *call)
{
    const char *cls = vmmdrv_str(p, "class"), *net = vmmdrv_str(p, "network");
    if (strcmp(cls, "microvm") != 0) {
        vmmdrv_fail(call, "isolation_unavailable", "sandbox-vmm offers class microvm only, not %.64s", cls);
        return -1;
    }
    json_object *v;
    bool has_nic = json_object_object_get_ex(p, "nic", &v) && !json_object_is_type(v, json_type_null);
    if (net[0] && strcmp(net, "none") != 0 && strcmp(net, "restricted") != 0 &&
        !(strcmp(net, "open") == 0 && has_nic)) {
        vmmdrv_fail(call, "isolation_unavailable",
                    "sandbox-vmm offers network none and restricted, and open only through the worker's egress "
                    "filter (a nic), not %.64s", net);
        return -1;
    }
    if (has_nic && strcmp(net, "open") != 0) {
        vmmdrv_fail(call, "invalid_argument", "a nic is for network open only, not %.64s", net[0] ? net : "none");
        return -1;
    }
    int64_t cpu = json_object_object_get_ex(p, "cpu_millis", &v) ? json_object_get_int64(v) : 0;
    int64_t mem = json_object_object_get_ex(p, "memory_mib", &v) ? json_object_get_int64(v) : 0;
    int64_t disk = json_object_object_get_ex(p, "disk_mib", &v) ? json_object_get_int64(v) : 0;
    if (cpu < 0 || mem < 0 || disk < 0 || cpu > 64000 || mem > 65536 || disk > 1024 * 1024) {
        vmmdrv_fail(call, "invalid_argument", "cpu_millis, memory_mib or disk_mib out of range");
        return -1;
    }
    w->vcpus = cpu <= 0 ? 1 : (unsigned)((cpu + 999) / 1000);
    w->memory_mb = mem <= 0 ? 256 : mem < 64 ? 64 : (unsigned)mem;
    w->disk_bytes = (uint64_t)(disk <= 0 ? 1024 : disk < 64 ? 64 : disk) << 20;
    w->image = vmmdrv_str(p, "image")[0] ? vmmdrv_str(p, "image") : d->default_image;
    w->from[0] = '\0';
    w->from_memory = w->restored = 0;
    w->private_image = json_object_object_get_ex(p, "image_private", &v) && json_object_get_boolean(v);
    if (vmmdrv_str(p, "from")[0]) {
        uint64_t sbytes = 0;
        if (vmmdrv_snapshot_disk(d, vmmdrv_str(p, "from"), vmmdrv_str(p, "tenant"), w->from, sizeof(w->from), &sbytes,
                                 &w->from_memory, call) != 0)
            return -1;
        if (sbytes > w->disk_bytes) /* its file system fills the disk it was made on */
            w->disk_bytes = sbytes;
    }
    /* the volumes' images, which the worker claimed for this sandbox */
    w->ndisks = 0;
    w->nic.fd = -1;
    json_object *disks = json_object_object_get_ex(p, "disks", &v) ? v : NULL;
    size_t nd = disks && json_object_is_type(disks, json_type_array) ? json_object_array_length(disks) : 0;
    if (disks && (!json_object_is_type(disks, json_type_array) || nd > VMM_DISKS_MAX)) {
        vmmdrv_fail(call, "invalid_argument", "disks: an array of at most %d", VMM_DISKS_MAX);
        return -1;
    }
    for (size_t i = 0; i < nd; i++) {
        json_object *o = json_object_array_get_idx(disks, i);
        const char *path = json_object_is_type(o, json_type_object) ? vmmdrv_str(o, "path") : "";
        const char *target = json_object_is_type(o, json_type_object) ? vmmdrv_str(o, "target") : "";
        int ro = json_object_object_get_ex(o, "read_only", &v) && json_object_get_boolean(v);
        if (path[0] != '/' || strstr(path, "/../") || target[0] != '/' || strlen(target) > 1024) {
            want_close(w);
            vmmdrv_fail(call, "invalid_argument", "disk %zu: an absolute path and target", i);
            return -1;
        }
        int fd = open(path, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            int e = errno;
            want_close(w);
            vmmdrv_fail(call, "runtime_error", "volume disk %zu: %s", i, strerror(e));
            return -1;
        }
        w->disks[w->ndisks] = (vmm_disk_t){.fd = fd, .read_only = ro};
        w->targets[w->ndisks++] = target;
    }
    if (want_nic(p, w, call) != 0) {
        want_close(w);
        return -1;
    }
    return 0;
}

/* The record of a new sandbox: the create's params, with the image's
 * Config (config, may be NULL) as Docker would apply it: its Env under the
 * create's env, its WorkingDir as the execs' default directory. */
static json_object *record_new(vmmdrv_t *d, json_object *p, const want_t *w, json_object *config)
{
    json_object *rec = json_object_new_object(), *v, *env = json_object_new_object(), *ienv;
    if (config != NULL && json_object_object_get_ex(config, "Env", &ienv) &&
        json_object_is_type(ienv, json_type_array))
        for (size_t i = 0; i < json_object_array_length(ienv) && i < SBX_MAX_ENV; i++) {
            const char *kv = json_object_get_string(json_object_array_get_idx(ienv, i)), *eq;
            if (kv == NULL || (eq = strchr(kv, '=')) == NULL || eq == kv || eq - kv > 255)
                continue;
            char key[256];
            snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
            json_object_object_add(env, key, json_object_new_string(eq + 1));
        }
    if (json_object_object_get_ex(p, "env", &v) && json_object_is_type(v, json_type_object)) {
        json_object_object_foreach(v, key, val)
            json_object_object_add(env, key, json_object_get(val));
    }
    const char *wd = config != NULL && json_object_object_get_ex(config, "WorkingDir", &v) &&
                             json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
    json_object_object_add(rec, "sandbox_id", json_object_new_string(vmmdrv_str(p, "sandbox_id")));
    json_object_object_add(rec, "tenant", json_object_new_string(vmmdrv_str(p, "tenant")));
    json_object_object_add(rec, "image", json_object_new_string(vmmdrv_str(p, "image")));
    json_object_object_add(rec, "accel", json_object_new_string(vmm_accel_name(d->cfg.accel)));
    json_object_object_add(rec, "network", json_object_new_string(vmmdrv_str(p, "network")));
    json_object_object_add(rec, "labels", json_object_object_get_ex(p, "labels", &v) &&
                           json_object_is_type(v, json_type_object) ? json_object_get(v) : json_object_new_object());
    json_object_object_add(rec, "env", env);
    json_object_object_add(rec, "workdir", json_object_new_string(wd[0] == '/' ? wd : ""));
    json_object_object_add(rec, "created_at", json_object_new_int64((int64_t)time(NULL)));
    json_object_object_add(rec, "from", json_object_new_string(vmmdrv_str(p, "from")));
    json_object_object_add(rec, "disk_bytes", json_object_new_int64((int64_t)w->disk_bytes));
    return rec;
}

/* The sandbox ids whose create runs: a second create of one waits for the
 * first (then finds its VM) instead of booting another. */
#define CREATING_MAX 64
static char creating[CREATING_MAX][130];

static int creating_enter(vmmdrv_t *d, const char *sid)
{
    for (int tries = 0; tries < 2000; tries++) { /* 200 s: within the create's deadline */
        pthread_mutex_lock(&d->mu);
        int busy = 0, slot = -1;
        for (int i = 0; i < CREATING_MAX; i++) {
            busy |= strcmp(creating[i], sid) == 0;
            if (!creating[i][0] && slot < 0)
                slot = i;
        }
        if (!busy && slot >= 0)
            snprintf(creating[slot], sizeof(creating[slot]), "%s", sid);
        pthread_mutex_unlock(&d->mu);
        if (!busy && slot >= 0)
            return slot;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void creating_leave(vmmdrv_t *d, int slot)
{
    pthread_mutex_lock(&d->mu);
    creating[slot][0] = '\0';
    pthread_mutex_unlock(&d->mu);
}

static json_object *create_one(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);

json_object *vmmdrv_m_create(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *sid = vmmdrv_str(p, "sandbox_id");
    if (!sid[0] || strlen(sid) > 128)
        return vmmdrv_fail(call, "invalid_argument", "create needs a sandbox_id of at most 128 bytes");
    int slot = creating_enter(d, sid);
    if (slot < 0)
        return vmmdrv_fail(call, "unavailable", "too many creates at once");
    json_object *o = create_one(d, p, call);
    creating_leave(d, slot);
    return o;
}

static json_object *create_one(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *sid = vmmdrv_str(p, "sandbox_id");
    find_t f = {.sandbox_id = sid};
    int restored = 0; /* a create made already says false: it cannot know any more */
    if (records_each(d, find_cb, &f)) { /* idempotent: that sandbox runs, or is replaced */
        char why[VMM_WHY_MAX] = "";
        if (vm_running(d, f.ref))
            goto done;
        destroy(d, f.ref, why);
    }
    want_t w;
    if (want_of(d, p, &w, call) != 0)
        return NULL;
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        want_close(&w);
        return vmmdrv_fail(call, "runtime_error", "getrandom: %s", strerror(errno));
    }
    snprintf(f.ref, sizeof(f.ref), "v%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
             rnd[5], rnd[6], rnd[7]);
    /* the image's Config (its env and working directory), as Docker
     * applies it to a container */
    json_object *config = NULL;
    char cwhy[VMM_WHY_MAX] = "";
    if (w.image != NULL && w.image[0] && vmm_docker_image_config(d->docker_sock, w.image, &config, cwhy) != 0)
        config = NULL;
    json_object *rec = record_new(d, p, &w, config);
    json_object_put(config);
    int rc = record_write(d, f.ref, rec);
    json_object_put(rec);
    if (rc != 0) {
        want_close(&w);
        return vmmdrv_fail(call, "runtime_error", "cannot write the sandbox record: %s", strerror(errno));
    }
    vmm_t *vm = NULL;
    int brc = boot(d, f.ref, &w, &vm, call);
    if (brc == 0 && mount_disks(vm, &w, call) != 0) {
        vmm_detach(vm);
        brc = -1;
    }
    want_close(&w); /* QEMU has its own copies */
    if (brc != 0) {
        char why[VMM_WHY_MAX] = "";
        destroy(d, f.ref, why);
        return NULL;
    }
    vmm_detach(vm); /* the registry attaches again at first use */
    restored = w.restored;
done:;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ref", json_object_new_string(f.ref));
    json_object_object_add(o, "memory", json_object_new_boolean(restored));
    json_object_object_add(o, "state", json_object_new_string("running"));
    json_object_object_add(o, "accel", json_object_new_string(vmm_accel_name(d->cfg.accel)));
    return o;
}
