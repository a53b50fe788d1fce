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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "errors.h"
#include "fdutil.h"
#include "ids.h"
#include "tarstream.h"
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

/* Writes meta as dir/meta.json, through meta.json.tmp (a reader sees the
 * old one or the new one whole): 0, or -1 with errno. */
static int meta_write(const char *dir, json_object *meta)
{
    char path[VMM_PATH_MAX + 16], tmp[VMM_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/meta.json", dir);
    snprintf(tmp, sizeof(tmp), "%s/meta.json.tmp", dir);
    FILE *f = fopen(tmp, "we");
    if (f == NULL)
        return -1;
    int ok = fputs(json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN), f) >= 0 && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

static void import_discard(const char *dir);

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
        if (meta_write(dir, meta) != 0) {
            snprintf(why, sizeof(why), "meta.json: %s", strerror(errno));
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
    char part[VMM_PATH_MAX + 8];
    snprintf(part, sizeof(part), "%s.part", dir);
    import_discard(part); /* a copy a crash cut short */
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

/* ---- copies between workers: snapshot_export and snapshot_import
 * (capability snapshot_copy). The stream is a tar of the snapshot's files,
 * meta.json first and disk.qcow2 last; what comes in is another worker's
 * making and is judged before this worker keeps it (vmm_snapshot_adopt). */

/* The files a copy carries, in the order sent (the last three with memory
 * only); small: at most COPY_SMALL_MAX bytes, the others bounded by the disk. */
static const struct {
    const char *name;
    bool small;
} copy_files[] = {{"meta.json", true}, {"disk.qcow2", false}, {"machine.json", true}, {"append", true},
                  {"state.mig", false}};
#define COPY_FILES (sizeof(copy_files) / sizeof(copy_files[0]))
#define COPY_SMALL_MAX (64 * 1024)
#define COPY_RESERVE ((int64_t)256 * 1024 * 1024) /* the state filesystem keeps this free */

typedef struct {
    int fd;                       /* the stream */
    int files[COPY_FILES];
    int64_t sizes[COPY_FILES];
    size_t n;
} export_t;

static void export_body(void *arg)
{
    export_t *x = arg;
    static __thread char buf[65536];
    int ok = 1;
    for (size_t i = 0; ok && i < x->n; i++) {
        unsigned char h[TARSTREAM_HEADER_MAX];
        int hl = tarstream_file_header(copy_files[i].name, x->sizes[i], 0600, (int64_t)time(NULL), h);
        ok = hl > 0 && vmmdrv_write_all(x->fd, h, (size_t)hl) == 0;
        for (int64_t left = x->sizes[i]; ok && left > 0;) {
            ssize_t r = read(x->files[i], buf, left < (int64_t)sizeof(buf) ? (size_t)left : sizeof(buf));
            if (r < 0 && errno == EINTR)
                continue;
            ok = r > 0 && vmmdrv_write_all(x->fd, buf, (size_t)r) == 0; /* a file that shrank cuts the stream */
            left -= r > 0 ? r : 0;
        }
        memset(buf, 0, TARSTREAM_BLOCK);
        size_t pad = tarstream_padding(x->sizes[i]);
        ok = ok && (pad == 0 || vmmdrv_write_all(x->fd, buf, pad) == 0);
    }
    memset(buf, 0, TARSTREAM_TRAILER);
    if (ok && vmmdrv_write_all(x->fd, buf, TARSTREAM_TRAILER) == 0) {
        shutdown(x->fd, SHUT_WR);
        close(x->fd);
    } else {
        fd_close_reset(x->fd); /* the reader sees an error, not an end */
    }
    for (size_t i = 0; i < x->n; i++)
        close(x->files[i]);
    free(x);
}

json_object *vmmdrv_m_snapshot_export(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *id = vmmdrv_str(p, "snapshot_id");
    char dir[VMM_PATH_MAX], path[VMM_PATH_MAX + 32];
    if (snap_dir(d, id, dir, sizeof(dir)) != 0)
        return vmmdrv_fail(call, "invalid_argument", "snapshot_export needs a snapshot_id (snp_…)");
    json_object *meta = meta_read(d, id), *v;
    if (meta == NULL)
        return vmmdrv_fail(call, "not_found", "no snapshot %s on this worker's microVM driver", id);
    int memory = json_object_object_get_ex(meta, "memory", &v) && json_object_get_boolean(v);
    json_object_put(meta);
    export_t *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return vmmdrv_fail(call, "runtime_error", "out of memory");
    /* every file open before the answer: a remove meanwhile takes names, not these */
    x->n = memory ? COPY_FILES : 2;
    for (size_t i = 0; i < x->n; i++) {
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, copy_files[i].name);
        x->files[i] = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (x->files[i] < 0 || fstat(x->files[i], &st) != 0 || !S_ISREG(st.st_mode)) {
            int e = errno;
            for (size_t k = 0; k <= i; k++)
                if (x->files[k] >= 0)
                    close(x->files[k]);
            free(x);
            return vmmdrv_fail(call, "runtime_error", "snapshot %s: %s: %s", id, copy_files[i].name, strerror(e));
        }
        x->sizes[i] = st.st_size;
    }
    x->fd = vmmdrv_stream_take(vmmdrv_str(p, "stream"), call);
    if (x->fd < 0) {
        for (size_t i = 0; i < x->n; i++)
            close(x->files[i]);
        free(x);
        return NULL;
    }
    call->after = export_body; /* the body after the answer */
    call->after_arg = x;
    return json_object_new_object();
}

typedef struct {
    char dir[VMM_PATH_MAX + 8];  /* the part directory it is unpacked into */
    int fd;                      /* the member being written, or -1 */
    unsigned seen;               /* a bit per copy_files entry */
    int64_t room, total;         /* what the filesystem can take; what came */
    const char *code;            /* why it was refused: the error's code, or NULL */
    char why[VMM_WHY_MAX];
} import_t;

static int import_refuse(import_t *im, const char *code, const char *fmt, const char *arg)
{
    im->code = code;
    snprintf(im->why, sizeof(im->why), fmt, arg);
    return SBX_EINVAL;
}

/* Ends the member being written: on disk (fsync) and closed. 0, or -1
 * with errno. */
static int import_close(import_t *im)
{
    if (im->fd < 0)
        return 0;
    int rc = fsync(im->fd);
    int e = errno;
    if (close(im->fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    im->fd = -1;
    errno = e;
    return rc == 0 ? 0 : -1;
}

static int import_entry(void *ud, const tarstream_entry_t *e)
{
    import_t *im = ud;
    if (import_close(im) != 0)
        return import_refuse(im, "runtime_error", "cannot write the copy: %s", strerror(errno));
    size_t k = 0;
    while (k < COPY_FILES && strcmp(e->name, copy_files[k].name) != 0)
        k++;
    if (k == COPY_FILES)
        return import_refuse(im, "invalid_argument", "the copy holds %.200s, which no snapshot has", e->name);
    if (e->type != '0' || e->sparse)
        return import_refuse(im, "invalid_argument", "%s in the copy is not a plain file", copy_files[k].name);
    if (im->seen & (1u << k))
        return import_refuse(im, "invalid_argument", "%s comes twice in the copy", copy_files[k].name);
    im->seen |= 1u << k;
    if (copy_files[k].small && e->size > COPY_SMALL_MAX)
        return import_refuse(im, "invalid_argument", "%s in the copy is too large", copy_files[k].name);
    im->total += e->size;
    if (im->total > im->room) {
        im->code = "payload_too_large";
        snprintf(im->why, sizeof(im->why), "the copy needs more than the %lld bytes the driver's state has free",
                 (long long)(im->room > 0 ? im->room : 0));
        return SBX_EINVAL;
    }
    char path[VMM_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", im->dir, copy_files[k].name);
    im->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (im->fd < 0)
        return import_refuse(im, "runtime_error", "cannot write the copy: %s", strerror(errno));
    return 0;
}

static int import_data(void *ud, const char *data, size_t n)
{
    import_t *im = ud;
    if (im->fd < 0 || vmmdrv_write_all(im->fd, data, n) != 0)
        return import_refuse(im, "runtime_error", "cannot write the copy: %s", strerror(errno));
    return 0;
}

/* Reads the stream into im's directory: 0, or -1 with im's code and why. */
static int import_read(int fd, import_t *im)
{
    tarstream_t t;
    if (tarstream_init(&t, import_entry, import_data, im) != 0) {
        import_refuse(im, "runtime_error", "%s", "out of memory");
        return -1;
    }
    static __thread char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = import_refuse(im, "runtime_error", "the copy's stream broke: %s", strerror(errno));
            break;
        }
        if (r == 0) {
            if ((rc = tarstream_finish(&t)) != 0 && !im->code)
                import_refuse(im, "invalid_argument", "the copy is not a whole archive: %s", t.error);
            break;
        }
        if ((rc = tarstream_push(&t, buf, (size_t)r)) != 0) {
            if (!im->code)
                import_refuse(im, "invalid_argument", "the copy is not an archive: %s", t.error);
            break;
        }
    }
    tarstream_release(&t);
    if (import_close(im) != 0 && rc == 0)
        rc = import_refuse(im, "runtime_error", "cannot write the copy: %s", strerror(errno));
    return rc == 0 ? 0 : -1;
}

/* What the copy's meta.json says, checked against the call: NULL with
 * im's why when it is not that snapshot of that tenant and installation. */
static json_object *import_meta(import_t *im, const char *id, const char *tenant, json_object *labels)
{
    char path[VMM_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/meta.json", im->dir);
    json_object *meta = vmmdrv_json_read(path, META_MAX), *v, *l = NULL;
    const char *cl = json_object_object_get_ex(labels, "dev.sandbox.cluster", &v) ? json_object_get_string(v) : "";
    if (meta == NULL || !json_object_is_type(meta, json_type_object))
        import_refuse(im, "invalid_argument", "%s", "the copy's meta.json is not a snapshot's");
    else if (strcmp(vmmdrv_str(meta, "id"), id) != 0 || strcmp(vmmdrv_str(meta, "tenant"), tenant) != 0)
        import_refuse(im, "policy_denied", "the copy is not snapshot %s of this tenant", id);
    else if (!json_object_object_get_ex(meta, "labels", &l) || !json_object_is_type(l, json_type_object) ||
             strcmp(vmmdrv_str(l, "dev.sandbox.cluster"), cl) != 0)
        import_refuse(im, "policy_denied", "the copy of %s was made for another installation", id);
    else if (!json_object_object_get_ex(meta, "disk_bytes", &v) || json_object_get_int64(v) <= 0)
        import_refuse(im, "invalid_argument", "%s", "the copy's meta.json has no disk size");
    else
        return meta;
    json_object_put(meta);
    return NULL;
}

/* Removes a part directory and what an import put there (a snapshot's
 * files, as a snapshot's own directory holds them). */
static void import_discard(const char *dir)
{
    snapshot_files_remove(dir);
    rmdir(dir);
}

json_object *vmmdrv_m_snapshot_import(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    const char *id = vmmdrv_str(p, "snapshot_id"), *tenant = vmmdrv_str(p, "tenant");
    char dir[VMM_PATH_MAX], path[VMM_PATH_MAX + 32];
    json_object *labels = NULL;
    if (snap_dir(d, id, dir, sizeof(dir)) != 0 || !tenant[0] || strlen(tenant) > 63 ||
        !json_object_object_get_ex(p, "labels", &labels) || !json_object_is_type(labels, json_type_object))
        return vmmdrv_fail(call, "invalid_argument",
                           "snapshot_import needs a snapshot_id (snp_…), a tenant and labels");
    import_t *im = calloc(1, sizeof(*im));
    if (im == NULL)
        return vmmdrv_fail(call, "runtime_error", "out of memory");
    im->fd = -1;
    snprintf(im->dir, sizeof(im->dir), "%s.part", dir);
    json_object *have = meta_read(d, id), *o = NULL;
    int fd = vmmdrv_stream_take(vmmdrv_str(p, "stream"), call);
    if (fd < 0)
        goto out;
    if (have != NULL) { /* idempotent: kept already (the stream is read to its end, and dropped) */
        static __thread char sink[65536];
        while (read(fd, sink, sizeof(sink)) > 0)
            ;
        o = strcmp(vmmdrv_str(have, "tenant"), tenant) == 0
                ? measure(have)
                : vmmdrv_fail(call, "conflict", "snapshot %s is another's", id);
        goto out;
    }
    snprintf(path, sizeof(path), "%.3000s/snapshots", d->state_dir);
    mkdir(path, 0711);
    import_discard(im->dir); /* a copy a crash cut short */
    struct statvfs vs;
    if (mkdir(im->dir, 0700) != 0 || statvfs(path, &vs) != 0) {
        vmmdrv_fail(call, "runtime_error", "snapshot directory: %s", strerror(errno));
        goto out;
    }
    im->room = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize - COPY_RESERVE;
    if (import_read(fd, im) != 0) {
        vmmdrv_fail(call, im->code, "snapshot %s: %s", id, im->why);
        goto out;
    }
    json_object *meta = import_meta(im, id, tenant, labels), *v;
    if (meta == NULL) {
        vmmdrv_fail(call, im->code, "%s", im->why);
        goto out;
    }
    int memory = json_object_object_get_ex(meta, "memory", &v) && json_object_get_boolean(v);
    unsigned want = memory ? (1u << COPY_FILES) - 1 : 3u;
    char why[VMM_WHY_MAX] = "";
    if (im->seen != want) {
        vmmdrv_fail(call, "invalid_argument", "snapshot %s: the copy %s", id,
                    memory ? "lacks the saved machine or its disk" : "is not a disk and its meta.json");
    } else if (vmm_snapshot_adopt(&d->cfg, im->dir,
                                  (uint64_t)(json_object_object_get_ex(meta, "disk_bytes", &v)
                                                 ? json_object_get_int64(v) : 0),
                                  memory, why) != 0) {
        vmmdrv_fail(call, "invalid_argument", "snapshot %s: refused copy: %s", id, why);
    } else {
        /* this worker's from now on: its labels, and where it came from */
        json_object *was = json_object_object_get_ex(meta, "labels", &v) ? json_object_get(v) : NULL;
        json_object_object_add(meta, "labels", json_object_get(labels));
        json_object_object_add(meta, "copied_from", json_object_new_string(vmmdrv_str(was, "dev.sandbox.worker")));
        json_object_object_add(meta, "copied_at", json_object_new_int64((int64_t)time(NULL)));
        json_object_put(was);
        if (meta_write(im->dir, meta) != 0 || chmod(im->dir, 0711) != 0 || rename(im->dir, dir) != 0) {
            vmmdrv_fail(call, "runtime_error", "keep snapshot %s: %s", id, strerror(errno));
        } else {
            o = measure(meta);
        }
    }
    json_object_put(meta);
out:
    if (o == NULL)
        import_discard(im->dir);
    if (fd >= 0)
        close(fd);
    json_object_put(have);
    free(im);
    return o;
}
