/* worker/vmm's fast start: a booted template saved with QEMU's migration
 * (through its QMP socket, the stream taken on a unix socket of ours) and its
 * frozen disk, for vmm_boot to restore from (vmm.h vmm_template_ensure). */
#include "vmm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "errors.h"

static int unix_path(struct sockaddr_un *a, const char *path)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    return vmm__path(a->sun_path, sizeof(a->sun_path), "%s", path);
}

/* Reads QMP lines until one holds "return" (0) or "error" (SBX_ERUNTIME), skipping events. */
static int qmp_reply(int fd, long timeout_ms, char *why)
{
    char buf[8192];
    size_t n = 0;
    long long deadline = vmm__now_ms() + timeout_ms;
    for (;;) {
        char *nl;
        while ((nl = memchr(buf, '\n', n)) != NULL) {
            *nl = '\0';
            int rc = strstr(buf, "\"return\"") ? 0 : strstr(buf, "\"error\"") ? SBX_ERUNTIME : 1;
            if (rc == SBX_ERUNTIME)
                vmm__why(why, "qmp: %.200s", buf);
            size_t used = (size_t)(nl - buf) + 1;
            memmove(buf, buf + used, n - used);
            n -= used;
            if (rc != 1)
                return rc;
        }
        if (n == sizeof(buf))
            n = 0; /* an over-long event: drop it */
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        long left = (long)(deadline - vmm__now_ms());
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0) {
            vmm__why(why, "qmp: no answer");
            return SBX_ETIMEOUT;
        }
        ssize_t r = read(fd, buf + n, sizeof(buf) - n);
        if (r <= 0) {
            vmm__why(why, "qmp: connection closed");
            return SBX_EIO;
        }
        n += (size_t)r;
    }
}

static int qmp_cmd(int fd, const char *json, long timeout_ms, char *why)
{
    size_t n = strlen(json);
    if (write(fd, json, n) != (ssize_t)n || write(fd, "\n", 1) != 1) {
        vmm__why(why, "qmp: write: %s", strerror(errno));
        return SBX_EIO;
    }
    return qmp_reply(fd, timeout_ms, why);
}

/* Copies the migration stream from c to out until QEMU closes it. */
static int copy_stream(int c, int out, char *why)
{
    char buf[1 << 16];
    for (;;) {
        ssize_t r = read(c, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            vmm__why(why, "reading the state: %s", strerror(errno));
            return SBX_EIO;
        }
        if (r == 0)
            return 0;
        for (ssize_t off = 0; off < r; ) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0) {
                vmm__why(why, "writing the state: %s", strerror(errno));
                return SBX_EIO;
            }
            off += w;
        }
    }
}

/* Asks QEMU (QMP on q) until it says the migration completed; then syncs out. */
static int migration_wait(int q, int out, char *why)
{
    for (int i = 0; i < 100; i++) {
        char reply[4096];
        if (write(q, "{\"execute\":\"query-migrate\"}\n", 28) != 28)
            break;
        struct pollfd qp = {.fd = q, .events = POLLIN};
        if (poll(&qp, 1, 5000) <= 0)
            break;
        ssize_t r = read(q, reply, sizeof(reply) - 1);
        if (r <= 0)
            break;
        reply[r] = '\0';
        if (strstr(reply, "\"completed\""))
            return fsync(out) == 0 ? 0 : SBX_EIO;
        if (strstr(reply, "\"failed\"")) {
            vmm__why(why, "QEMU's migration failed");
            return SBX_ERUNTIME;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    vmm__why(why, "QEMU did not say its migration completed");
    return SBX_ERUNTIME;
}

/* Saves the running VM in dir: its migration stream into out_path (QEMU pauses it at the end). */
static int save_state(const char *dir, uid_t uid, const char *out_path, char *why)
{
    char qmp_path[VMM_PATH_MAX], mig_path[VMM_PATH_MAX], cmd[VMM_PATH_MAX + 128];
    struct sockaddr_un a;
    int q = -1, l = -1, c = -1, out = -1, rc;
    vmm__path(qmp_path, sizeof(qmp_path), "%s/qmp.sock", dir);
    vmm__path(mig_path, sizeof(mig_path), "%s/mig.sock", dir);
    if ((rc = unix_path(&a, qmp_path)) != 0)
        return rc;
    q = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (q < 0 || connect(q, (struct sockaddr *)&a, sizeof(a)) != 0) {
        vmm__why(why, "qmp connect: %s", strerror(errno));
        rc = SBX_EIO;
        goto cleanup;
    }
    /* the greeting has no "return": read it as an event up to the capabilities' answer */
    if ((rc = qmp_cmd(q, "{\"execute\":\"qmp_capabilities\"}", 10000, why)) != 0)
        goto cleanup;
    if ((rc = unix_path(&a, mig_path)) != 0)
        goto cleanup;
    l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 || chown(mig_path, uid, (gid_t)-1) != 0) {
        vmm__why(why, "migration socket: %s", strerror(errno));
        rc = SBX_EIO;
        goto cleanup;
    }
    /* no stop first: a stream taken from a running guest restores running
     * (QEMU pauses the source itself when the migration completes) */
    snprintf(cmd, sizeof(cmd), "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"unix:%s\"}}", mig_path);
    if ((rc = qmp_cmd(q, cmd, 10000, why)) != 0)
        goto cleanup;
    struct pollfd pf = {.fd = l, .events = POLLIN};
    if (poll(&pf, 1, 30000) <= 0 || (c = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0) {
        vmm__why(why, "QEMU did not connect to send its state");
        rc = SBX_ETIMEOUT;
        goto cleanup;
    }
    out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* the guest's RAM */
    if (out < 0) {
        vmm__why(why, "create %s: %s", out_path, strerror(errno));
        rc = SBX_EIO;
        goto cleanup;
    }
    if ((rc = copy_stream(c, out, why)) == 0)
        rc = migration_wait(q, out, why);
cleanup:
    if (out >= 0)
        close(out);
    if (c >= 0)
        close(c);
    if (l >= 0) {
        close(l);
        unlink(mig_path);
    }
    if (q >= 0)
        close(q);
    return rc;
}

int vmm_template_ensure(const vmm_config_t *cfg, const vmm_spec_t *spec, char *ret_dir, size_t dir_cap, char *ret_why)
{
    char kernel[VMM_PATH_MAX], release[128], cache[VMM_PATH_MAX], tdir[VMM_PATH_MAX], tmpdir[VMM_PATH_MAX];
    char key[3 * VMM_PATH_MAX], path[VMM_PATH_MAX], id[VMM_ID_MAX], append[256] = "", initrd[VMM_PATH_MAX];
    vmm_t *vm = NULL;
    int rc;
    if (spec == NULL || spec->base_disk == NULL) {
        vmm__why(ret_why, "a template needs a base disk");
        return SBX_EINVAL;
    }
    if ((rc = vmm_kernel_find(cfg, kernel, sizeof(kernel), release, sizeof(release), ret_why)) != 0 ||
        (rc = vmm_initramfs_ensure(cfg, initrd, sizeof(initrd), ret_why)) != 0)
        return rc;
    /* the initramfs's name carries the agent's hash: a new agent, a new template */
    snprintf(key, sizeof(key), "%.127s|%.4000s|%.4000s|%u|%u|%llu|%d", release, initrd, spec->base_disk, spec->vcpus, spec->memory_mb,
             (unsigned long long)spec->disk_bytes, cfg->accel);
    uint64_t h = vmm__fnv1a(VMM_FNV_START, key, strlen(key));
    if ((rc = vmm__cache_dir(cfg, cache, sizeof(cache))) != 0 ||
        (rc = vmm__path(tdir, sizeof(tdir), "%s/tpl-%016llx", cache, (unsigned long long)h)) != 0)
        return rc;
    vmm__path(path, sizeof(path), "%s/state.mig", tdir);
    if (access(path, R_OK) == 0)
        return vmm__path(ret_dir, dir_cap, "%s", tdir);
    snprintf(id, sizeof(id), "tpl-%016llx-%d", (unsigned long long)h, (int)getpid());
    vmm__path(tmpdir, sizeof(tmpdir), "%s.tmp.%d", tdir, (int)getpid());
    vmm__rm_tree(tmpdir);
    if (mkdir(tmpdir, 0755) != 0) {
        vmm__why(ret_why, "mkdir %s: %s", tmpdir, strerror(errno));
        return SBX_EIO;
    }
    vmm_spec_t s = *spec;
    s.id = id;
    s.template_dir = NULL;
    vmm_boot_extra_t x = {.ret_append = append};
    if ((rc = vmm__boot(cfg, &s, &x, &vm, ret_why)) != 0)
        goto cleanup;
    /* Nothing of the guest's in flight when the host goes: the agent answers
     * every HELLO that queued up while it booted, and a reply written as the
     * host hangs up can leave QEMU's end of the port throttled in the saved
     * state, a restored VM that never answers. Then let the agent see the
     * host go (it forgets the connection) before the state is taken. */
    if (vmm__agent_quiesce(vm, 500, 10000) != 0) {
        vmm__why(ret_why, "the guest agent of the template did not fall silent");
        rc = SBX_ERUNTIME;
        goto cleanup;
    }
    vmm_detach(vm);
    vm = NULL;
    struct timespec ts = {0, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    char vdir[VMM_PATH_MAX], from[VMM_PATH_MAX], to[VMM_PATH_MAX];
    vmm__vm_dir(cfg, id, vdir, sizeof(vdir));
    struct stat st;
    if (stat(vdir, &st) != 0) {
        rc = SBX_EIO;
        goto cleanup;
    }
    vmm__path(to, sizeof(to), "%s/state.mig", tmpdir);
    if ((rc = save_state(vdir, st.st_uid, to, ret_why)) != 0)
        goto cleanup;
    vmm__path(from, sizeof(from), "%s/overlay.qcow2", vdir);
    vmm__path(to, sizeof(to), "%s/disk.qcow2", tmpdir);
    /* QEMU is stopped and stays so until destroyed: the disk is frozen as the state saw it */
    if (rename(from, to) != 0 || chown(to, 0, 0) != 0 || chmod(to, 0644) != 0) {
        vmm__why(ret_why, "keep the template's disk: %s", strerror(errno));
        rc = SBX_EIO;
        goto cleanup;
    }
    vmm__path(to, sizeof(to), "%s/append", tmpdir);
    if ((rc = vmm__write_file(to, append, strlen(append), 0644)) != 0)
        goto cleanup;
    if (rename(tmpdir, tdir) != 0) {
        if (access(path, R_OK) != 0) { /* else another driver made it meanwhile */
            vmm__why(ret_why, "rename %s: %s", tdir, strerror(errno));
            rc = SBX_EIO;
            goto cleanup;
        }
    }
    rc = vmm__path(ret_dir, dir_cap, "%s", tdir);
cleanup:
    vmm_detach(vm);
    vmm_destroy(cfg, id, NULL);
    vmm__rm_tree(tmpdir);
    return rc;
}

/* ---- a running VM's memory (vmm.h vmm_state_save) ---- */

/* One QMP command to the VM in dir, on a connection of its own. */
static int qmp_once(const char *dir, const char *json, char *why)
{
    char qmp_path[VMM_PATH_MAX];
    struct sockaddr_un a;
    int rc;
    if ((rc = vmm__path(qmp_path, sizeof(qmp_path), "%s/qmp.sock", dir)) != 0 ||
        (rc = unix_path(&a, qmp_path)) != 0)
        return rc;
    int q = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (q < 0 || connect(q, (struct sockaddr *)&a, sizeof(a)) != 0) {
        vmm__why(why, "qmp connect: %s", strerror(errno));
        if (q >= 0)
            close(q);
        return SBX_EIO;
    }
    rc = qmp_cmd(q, "{\"execute\":\"qmp_capabilities\"}", 10000, why);
    if (rc == 0)
        rc = qmp_cmd(q, json, 10000, why);
    close(q);
    return rc;
}

/* The JSON object in dir/name (at most 16 KiB), or NULL. */
static json_object *json_in(const char *dir, const char *name)
{
    char path[VMM_PATH_MAX], buf[16384];
    if (vmm__path(path, sizeof(path), "%s/%s", dir, name) != 0 || vmm__read_file(path, buf, sizeof(buf)) <= 0)
        return NULL;
    json_object *o = json_tokener_parse(buf);
    if (o != NULL && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

static const char *meta_str(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v) : "";
}

static int64_t meta_int(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : -1;
}

int vmm_state_save(const vmm_config_t *cfg, const char *id, const char *out_dir, long long *ret_bytes, char *ret_why)
{
    char vdir[VMM_PATH_MAX], path[VMM_PATH_MAX], part[VMM_PATH_MAX];
    struct stat st;
    int rc;
    if ((rc = vmm__vm_dir(cfg, id, vdir, sizeof(vdir))) != 0) {
        vmm__why(ret_why, "bad VM id");
        return rc;
    }
    json_object *meta = json_in(vdir, "meta.json");
    if (meta == NULL || !meta_str(meta, "append")[0] || stat(vdir, &st) != 0) {
        json_object_put(meta);
        vmm__why(ret_why, "VM %s was booted without what a memory snapshot needs (a driver older than this one "
                 "booted it): snapshot it without its memory", id);
        return SBX_EUNAVAIL;
    }
    if (meta_int(meta, "ndisks") != 0) {
        json_object_put(meta);
        vmm__why(ret_why, "VM %s has data disks (volumes): a machine restored from its memory could not get "
                 "them back; snapshot it without its memory", id);
        return SBX_EINVAL;
    }
    /* the stream, then the disk: QEMU stops the guest as the stream ends and
     * lets go of its disk, so the copy is the disk that memory saw */
    vmm__path(part, sizeof(part), "%s/state.mig.part", out_dir);
    rc = save_state(vdir, st.st_uid, part, ret_why);
    if (rc == 0)
        rc = vmm_disk_save(cfg, id, (vmm__path(path, sizeof(path), "%s/disk.qcow2", out_dir), path), ret_bytes,
                           ret_why);
    /* the VM goes on whatever came of it (cont takes its disk back) */
    char cwhy[VMM_WHY_MAX] = "";
    if (qmp_once(vdir, "{\"execute\":\"cont\"}", cwhy) != 0 && rc == 0) {
        vmm__why(ret_why, "the VM did not go on after its state was saved: %s", cwhy);
        rc = SBX_ERUNTIME;
    }
    if (rc == 0) {
        json_object *m = json_object_new_object();
        static const char *const keys[] = {"vcpus", "memory_mb", "disk_bytes"};
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            json_object_object_add(m, keys[i], json_object_new_int64(meta_int(meta, keys[i])));
        static const char *const skeys[] = {"accel", "release", "initrd", "append"};
        for (size_t i = 0; i < sizeof(skeys) / sizeof(skeys[0]); i++)
            json_object_object_add(m, skeys[i], json_object_new_string(meta_str(meta, skeys[i])));
        const char *text = json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN);
        const char *append = meta_str(meta, "append");
        if (vmm__path(path, sizeof(path), "%s/machine.json", out_dir) != 0 ||
            vmm__write_file(path, text, strlen(text), 0600) != 0 ||
            vmm__path(path, sizeof(path), "%s/append", out_dir) != 0 ||
            vmm__write_file(path, append, strlen(append), 0600) != 0 ||
            vmm__path(path, sizeof(path), "%s/state.mig", out_dir) != 0 || rename(part, path) != 0) {
            vmm__why(ret_why, "keep the saved state in %s: %s", out_dir, strerror(errno));
            rc = SBX_EIO;
        }
        json_object_put(m);
    }
    if (rc != 0)
        unlink(part);
    json_object_put(meta);
    return rc;
}

int vmm_guest_continue(const vmm_config_t *cfg, const char *id, char *ret_why)
{
    char vdir[VMM_PATH_MAX], sock[VMM_PATH_MAX];
    if (vmm__vm_dir(cfg, id, vdir, sizeof(vdir)) != 0) {
        vmm__why(ret_why, "bad VM id");
        return SBX_EINVAL;
    }
    if (vmm__path(sock, sizeof(sock), "%s/qmp.sock", vdir) != 0 || access(sock, F_OK) != 0)
        return 0; /* booted before VMs had QMP: never saved, never stopped by it */
    return qmp_once(vdir, "{\"execute\":\"cont\"}", ret_why);
}

static const char *path_base(const char *path)
{
    const char *b = strrchr(path, '/');
    return b != NULL ? b + 1 : path;
}

int vmm_state_fits(const vmm_config_t *cfg, const char *dir, const vmm_spec_t *spec, char *ret_why)
{
    char kernel[VMM_PATH_MAX], release[128], initrd[VMM_PATH_MAX];
    json_object *m = json_in(dir, "machine.json");
    if (m == NULL) {
        vmm__why(ret_why, "no saved machine in %s", dir);
        return 0;
    }
    int fits = 0;
    if (spec->ndisks > 0)
        vmm__why(ret_why, "it has data disks (volumes), which a restored machine cannot gain");
    else if (meta_int(m, "vcpus") != (int64_t)spec->vcpus || meta_int(m, "memory_mb") != (int64_t)spec->memory_mb)
        vmm__why(ret_why, "it asks %u vCPUs and %u MiB; the memory was saved with %lld and %lld", spec->vcpus,
                 spec->memory_mb, (long long)meta_int(m, "vcpus"), (long long)meta_int(m, "memory_mb"));
    else if (meta_int(m, "disk_bytes") != (int64_t)spec->disk_bytes)
        vmm__why(ret_why, "its disk is not the size the memory was saved with");
    else if (strcmp(meta_str(m, "accel"), vmm_accel_name(cfg->accel)) != 0)
        vmm__why(ret_why, "the memory was saved under %s, this worker runs %s", meta_str(m, "accel"),
                 vmm_accel_name(cfg->accel));
    else if (vmm_kernel_find(cfg, kernel, sizeof(kernel), release, sizeof(release), ret_why) != 0 ||
             vmm_initramfs_ensure(cfg, initrd, sizeof(initrd), ret_why) != 0)
        ;
    /* the initramfs by its name (the kernel release and a hash of what it
     * holds): a copy from another worker names its own cache's file */
    else if (strcmp(meta_str(m, "release"), release) != 0 ||
             strcmp(path_base(meta_str(m, "initrd")), path_base(initrd)) != 0)
        vmm__why(ret_why, "the guest kernel or agent changed since the memory was saved");
    else
        fits = 1;
    json_object_put(m);
    return fits;
}

/* ---- a snapshot that came from another worker -------------------------- */

/* qcow2's header is big-endian, and h need not be aligned */
static uint64_t be64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return be64toh(v);
}

static uint32_t be32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return be32toh(v);
}

int vmm_qcow2_standalone(const unsigned char *h, size_t n, uint64_t *ret_size, char *ret_why)
{
    if (n < 72 || memcmp(h, "QFI\xfb", 4) != 0) {
        vmm__why(ret_why, "not a qcow2 image");
        return SBX_EINVAL;
    }
    uint32_t version = be32(h + 4);
    if (version != 2 && version != 3) {
        vmm__why(ret_why, "qcow2 version %u (2 or 3 are taken)", version);
        return SBX_EINVAL;
    }
    if (be64(h + 8) != 0 || be32(h + 16) != 0) {
        vmm__why(ret_why, "the image names a backing file: a snapshot's disk stands alone");
        return SBX_EINVAL;
    }
    if (be32(h + 32) != 0) {
        vmm__why(ret_why, "the image is encrypted");
        return SBX_EINVAL;
    }
    if (version == 3) {
        if (n < 104) {
            vmm__why(ret_why, "a short qcow2 header");
            return SBX_EINVAL;
        }
        /* incompatible features: bit 2, an external data file (a host path
         * QEMU would open); bits QEMU does not know refuse the image anyway */
        uint64_t incompat = be64(h + 72);
        if (incompat & (UINT64_C(1) << 2)) {
            vmm__why(ret_why, "the image keeps its data in an external file");
            return SBX_EINVAL;
        }
        if (incompat & ~(uint64_t)0x1f) {
            vmm__why(ret_why, "the image needs qcow2 features unknown here (%#llx)", (unsigned long long)incompat);
            return SBX_EINVAL;
        }
    }
    *ret_size = be64(h + 24);
    return 0;
}

/* The printable text of file name in dir (at most cap - 1 bytes, no
 * newline or control byte): 0, or SBX_EINVAL. */
static int text_in(const char *dir, const char *name, char *out, size_t cap)
{
    char path[VMM_PATH_MAX];
    if (vmm__path(path, sizeof(path), "%s/%s", dir, name) != 0)
        return SBX_EINVAL;
    ssize_t n = vmm__read_file(path, out, cap);
    if (n <= 0 || (size_t)n >= cap - 1)
        return SBX_EINVAL;
    for (ssize_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] > 0x7e)
            return SBX_EINVAL;
    return 0;
}

int vmm_snapshot_adopt(const vmm_config_t *cfg, const char *dir, uint64_t disk_bytes, int memory, char *ret_why)
{
    char path[VMM_PATH_MAX];
    unsigned char h[104];
    uid_t uid;
    gid_t gid;
    int rc;
    if ((rc = vmm__path(path, sizeof(path), "%s/disk.qcow2", dir)) != 0) {
        vmm__why(ret_why, "bad snapshot directory");
        return rc;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        vmm__why(ret_why, "no disk.qcow2 file");
        return SBX_EINVAL;
    }
    ssize_t n = pread(fd, h, sizeof(h), 0);
    uint64_t size = 0;
    rc = vmm_qcow2_standalone(h, n > 0 ? (size_t)n : 0, &size, ret_why);
    if (rc == 0 && size != disk_bytes) {
        vmm__why(ret_why, "the disk is %llu bytes; the snapshot says %llu", (unsigned long long)size,
                 (unsigned long long)disk_bytes);
        rc = SBX_EINVAL;
    }
    /* QEMU's user reads it as a later VM's backing file; no one else */
    if (rc == 0 && (rc = vmm__run_as(cfg, &uid, &gid, ret_why)) == 0 &&
        (fchown(fd, uid, gid) != 0 || fchmod(fd, 0600) != 0)) {
        vmm__why(ret_why, "%s: %s", path, strerror(errno));
        rc = SBX_EIO;
    }
    close(fd);
    if (rc != 0 || !memory)
        return rc;
    /* the machine: as vmm_state_save writes it; vmm_state_fits judges it
     * against this worker's before a VM resumes it */
    char text[256];
    json_object *m = json_in(dir, "machine.json");
    static const char *const ikeys[] = {"vcpus", "memory_mb", "disk_bytes"};
    static const char *const skeys[] = {"accel", "release", "initrd", "append"};
    rc = m != NULL && json_object_is_type(m, json_type_object) ? 0 : SBX_EINVAL;
    for (size_t i = 0; rc == 0 && i < sizeof(ikeys) / sizeof(ikeys[0]); i++)
        if (meta_int(m, ikeys[i]) <= 0)
            rc = SBX_EINVAL;
    for (size_t i = 0; rc == 0 && i < sizeof(skeys) / sizeof(skeys[0]); i++)
        if (!meta_str(m, skeys[i])[0] || strlen(meta_str(m, skeys[i])) >= VMM_PATH_MAX)
            rc = SBX_EINVAL;
    json_object_put(m);
    if (rc != 0) {
        vmm__why(ret_why, "machine.json is not a saved machine");
        return rc;
    }
    if (text_in(dir, "append", text, sizeof(text)) != 0) {
        vmm__why(ret_why, "append is not a kernel command line");
        return SBX_EINVAL;
    }
    if (vmm__path(path, sizeof(path), "%s/state.mig", dir) != 0 || lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size <= 0) {
        vmm__why(ret_why, "no saved state (state.mig)");
        return SBX_EINVAL;
    }
    return 0;
}
