/* worker/vmm's VMs as processes: the KVM probe, QEMU's command line, the
 * unprivileged user and cgroup it runs in, the per-VM state directory, and
 * finding (vmm_list) and removing (vmm_destroy) VMs a previous driver left. */
#include "vmm_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <json-c/json.h>
#include <linux/kvm.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "fdutil.h"
#include "limits.h"

#include <x86intrin.h>

/* QEMU's memory beyond the guest's: TCG's translation cache (tb-size) and its own heap. */
#define QEMU_OVERHEAD_MB 256
#define TCG_TB_MB        64

const char *vmm_accel_name(int accel) { return accel == VMM_ACCEL_KVM ? "kvm" : "tcg"; }

static const char *qemu_bin(const vmm_config_t *cfg) { return cfg->qemu ? cfg->qemu : "qemu-system-x86_64"; }


/* The group QEMU's user needs to open /dev/kvm: its group when the group
 * may read and write it (Debian: root:kvm 0660), as libvirt gives its qemu
 * user. 1 with *ret set, 0 when no group is needed or would help. */
static int kvm_group(gid_t *ret)
{
    struct stat st;
    if (stat("/dev/kvm", &st) != 0 || !S_ISCHR(st.st_mode) || (st.st_mode & 0006) == 0006 ||
        (st.st_mode & 0060) != 0060 || st.st_gid == 0)
        return 0;
    *ret = st.st_gid;
    return 1;
}

/* In a child about to exec QEMU: becomes uid/gid, with /dev/kvm's group as
 * the one supplementary group when kvm is set. 0 or -1. */
static int drop_to(uid_t uid, gid_t gid, bool kvm)
{
    gid_t groups[1];
    int n = kvm ? kvm_group(&groups[0]) : 0;
    return setgroups((size_t)n, groups) == 0 && setgid(gid) == 0 && setuid(uid) == 0 ? 0 : -1;
}

static void kvm_kernel_try(const vmm_config_t *cfg, const char *kernel, uid_t uid, gid_t gid, int *ret_accel,
                           char *ret_why);

int vmm_probe(const vmm_config_t *cfg, int *ret_accel, char *ret_why)
{
    *ret_accel = VMM_ACCEL_TCG;
    const char *ver[] = {qemu_bin(cfg), "-version", NULL};
    char why[VMM_WHY_MAX];
    if (vmm__run(ver, -1, -1, 10000, why) != 0) {
        vmm__why(ret_why, "qemu cannot run: %s (apt-get install qemu-system-x86)", why);
        return SBX_EUNAVAIL;
    }
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        vmm__why(ret_why, "tcg: /dev/kvm: %s", strerror(errno));
        return 0;
    }
    int vm = ioctl(fd, KVM_CREATE_VM, 0);
    int e = errno;
    close(fd);
    if (vm < 0) {
        vmm__why(ret_why, "tcg: KVM_CREATE_VM: %s", strerror(e));
        return 0;
    }
    close(vm);
    char kernel[VMM_PATH_MAX], release[128];
    if (vmm_kernel_find(cfg, kernel, sizeof(kernel), release, sizeof(release), why) != 0) {
        vmm__why(ret_why, "tcg: no kernel to try KVM with: %s", why);
        return 0;
    }
    /* The distribution's bzImage itself (/boot is world-readable), not the
     * unpacked ELF in the state dir's cache: QEMU's user may not reach that
     * dir yet, and an unreadable kernel must not pass for a KVM that fails. */
    uid_t uid;
    gid_t gid;
    if (vmm__run_as(cfg, &uid, &gid, why) != 0) {
        vmm__why(ret_why, "tcg: %s", why);
        return 0;
    }
    kvm_kernel_try(cfg, kernel, uid, gid, ret_accel, ret_why);
    return 0;
}

/* The guest kernel must really run under KVM, as the user QEMU runs as (with
 * the group that opens /dev/kvm): nested KVM can create VMs, run the
 * firmware and still stop the guest with "KVM internal error" once its
 * kernel starts, and a root-only /dev/kvm opens for this root driver but not
 * for QEMU. The kernel boots with no root and console=ttyS0; under working
 * KVM it prints its banner within a fraction of a second. */
#define KVM_TRY_MS 5000

static void kvm_kernel_try(const vmm_config_t *cfg, const char *kernel, uid_t uid, gid_t gid, int *ret_accel,
                           char *ret_why)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        vmm__why(ret_why, "tcg: pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        fd_close_from(3);
        if (chdir("/") != 0 || drop_to(uid, gid, true) != 0)
            _exit(126);
        execlp(qemu_bin(cfg), qemu_bin(cfg), "-M", "microvm,isa-serial=on", "-accel", "kvm", "-cpu", "host",
               "-nodefaults", "-no-user-config", "-display", "none", "-m", "128", "-nic", "none", "-kernel", kernel,
               "-append", "console=ttyS0 panic=-1", "-serial", "stdio", "-no-reboot",
               (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        vmm__why(ret_why, "tcg: fork: %s", strerror(errno));
        return;
    }
    char buf[8192];
    size_t len = 0;
    bool banner = false, eof = false, internal = false;
    long long deadline = vmm__now_ms() + KVM_TRY_MS;
    for (;;) {
        long long left = deadline - vmm__now_ms();
        if (banner || eof || internal || left <= 0)
            break;
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        ssize_t n = read(pfd[0], buf + len, sizeof(buf) - 1 - len);
        if (n <= 0) {
            eof = true;
            continue;
        }
        len += (size_t)n;
        buf[len] = '\0';
        banner = memmem(buf, len, "Linux version", 13) != NULL;
        internal = memmem(buf, len, "KVM internal error", 18) != NULL;
        if (len > sizeof(buf) / 2 && !banner && !internal) { /* keep the tail */
            memmove(buf, buf + len - 64, 64);
            len = 64;
        }
    }
    close(pfd[0]);
    kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    if (banner && !internal) {
        *ret_accel = VMM_ACCEL_KVM;
        vmm__why(ret_why, "kvm");
    } else if (internal)
        vmm__why(ret_why, "tcg: under -accel kvm the guest kernel stopped with a KVM internal error (nested KVM "
                          "that cannot run this guest)");
    else if (eof) {
        /* QEMU's last line says why (a device it cannot open, an accel error) */
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        const char *last = len ? buf + len : buf;
        while (last > buf && last[-1] != '\n')
            last--;
        vmm__why(ret_why, "tcg: qemu -accel kvm as uid %u exited before the guest kernel ran (%.120s): /dev/kvm "
                          "cannot run a vCPU here (nested?) or that user cannot open it", (unsigned)uid,
                 *last ? last : "no message");
    }
    else
        vmm__why(ret_why, "tcg: under -accel kvm the guest kernel printed nothing in %d ms (a vCPU that cannot "
                          "run it: nested KVM?)", KVM_TRY_MS);
}

/* ---- cgroups ---- */

typedef struct {
    char dir[3][VMM_PATH_MAX];
    int n;
    char note[VMM_WHY_MAX];
} cg_t;

/* The driver's own cgroup path for a v1 controller, or for v2 with
 * controller "" (the "0::" line), from /proc/self/cgroup. */
static int own_cgroup(const char *controller, char *out, size_t cap)
{
    char buf[4096];
    if (vmm__read_file("/proc/self/cgroup", buf, sizeof(buf)) < 0)
        return -1;
    size_t cl = strlen(controller);
    for (char *line = buf; *line; ) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 != NULL && (size_t)(c2 - c1 - 1) == cl && memcmp(c1 + 1, controller, cl) == 0)
            return vmm__path(out, cap, "%s", c2 + 1) == 0 ? 0 : -1;
        if (end == NULL)
            break;
        line = end + 1;
    }
    return -1;
}

static int put_file(const char *dir, const char *name, const char *value)
{
    char path[VMM_PATH_MAX];
    if (vmm__path(path, sizeof(path), "%s/%s", dir, name) != 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, value, strlen(value));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(value) ? 0 : -1;
}

static void cg_remove(char dirs[][VMM_PATH_MAX], int n)
{
    for (int i = 0; i < n; i++)
        for (int t = 0; t < 50 && rmdir(dirs[i]) != 0 && errno == EBUSY; t++) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
}

/* Makes the VM's cgroup(s) below the driver's own, with the limits: cgroup v2
 * when /sys/fs/cgroup is v2, else the v1 memory, cpu and pids hierarchies.
 * On any failure nothing is left and cg->note says why (QEMU then runs with
 * its rlimits only). */
static void cg_make(cg_t *cg, const char *id, const vmm_spec_t *spec)
{
    char own[VMM_PATH_MAX], v[64];
    unsigned long long mem = ((unsigned long long)spec->memory_mb + QEMU_OVERHEAD_MB) << 20;
    unsigned pids = spec->pids_max ? spec->pids_max : 256;
    cg->n = 0;
    if (access("/sys/fs/cgroup/cgroup.controllers", R_OK) == 0) {
        char parent[VMM_PATH_MAX];
        if (own_cgroup("", own, sizeof(own)) != 0 ||
            vmm__path(parent, sizeof(parent), "/sys/fs/cgroup%s", strcmp(own, "/") ? own : "") != 0 ||
            vmm__path(cg->dir[0], sizeof(cg->dir[0]), "%s/sbx-vmm-%s", parent, id) != 0) {
            vmm__why(cg->note, "none: cannot find the driver's cgroup");
            return;
        }
        put_file(parent, "cgroup.subtree_control", "+cpu +memory +pids");
        if (mkdir(cg->dir[0], 0755) != 0) {
            vmm__why(cg->note, "none: mkdir %s: %s", cg->dir[0], strerror(errno));
            return;
        }
        cg->n = 1;
        snprintf(v, sizeof(v), "%llu", mem);
        int bad = put_file(cg->dir[0], "memory.max", v) != 0;
        snprintf(v, sizeof(v), "%u 100000", spec->vcpus * 100000u);
        bad = bad || put_file(cg->dir[0], "cpu.max", v) != 0;
        snprintf(v, sizeof(v), "%u", pids);
        bad = bad || put_file(cg->dir[0], "pids.max", v) != 0;
        if (bad) {
            vmm__why(cg->note, "none: cgroup v2 limits under %s: %s (controllers not delegated there)", parent, strerror(errno));
            cg_remove(cg->dir, cg->n);
            cg->n = 0;
            return;
        }
        vmm__why(cg->note, "cgroup v2 %s: memory.max %llu, cpu.max %u 100000, pids.max %u", cg->dir[0], mem,
                 spec->vcpus * 100000u, pids);
        return;
    }
    const char *const ctl[3] = {"memory", "cpu", "pids"};
    for (int i = 0; i < 3; i++) {
        if (own_cgroup(ctl[i], own, sizeof(own)) != 0 ||
            vmm__path(cg->dir[i], sizeof(cg->dir[i]), "/sys/fs/cgroup/%s%s/sbx-vmm-%s", ctl[i],
                      strcmp(own, "/") ? own : "", id) != 0 ||
            mkdir(cg->dir[i], 0755) != 0) {
            vmm__why(cg->note, "none: no cgroup v1 %s hierarchy to use: %s", ctl[i], strerror(errno));
            cg_remove(cg->dir, cg->n);
            cg->n = 0;
            return;
        }
        cg->n++;
    }
    snprintf(v, sizeof(v), "%llu", mem);
    int bad = put_file(cg->dir[0], "memory.limit_in_bytes", v) != 0;
    bad = bad || put_file(cg->dir[1], "cpu.cfs_period_us", "100000") != 0;
    snprintf(v, sizeof(v), "%u", spec->vcpus * 100000u);
    bad = bad || put_file(cg->dir[1], "cpu.cfs_quota_us", v) != 0;
    snprintf(v, sizeof(v), "%u", pids);
    bad = bad || put_file(cg->dir[2], "pids.max", v) != 0;
    if (bad) {
        vmm__why(cg->note, "none: cgroup v1 limits: %s", strerror(errno));
        cg_remove(cg->dir, cg->n);
        cg->n = 0;
        return;
    }
    vmm__why(cg->note, "cgroup v1 (memory, cpu, pids) sbx-vmm-%s: memory %llu, cpu quota %u/100000, pids %u", id, mem,
             spec->vcpus * 100000u, pids);
}

/* ---- processes ---- */

/* The start time of pid (/proc/pid/stat field 22), 0 when it is gone or a zombie. */
static unsigned long long proc_starttime(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (vmm__read_file(path, buf, sizeof(buf)) <= 0)
        return 0;
    char *p = strrchr(buf, ')');
    if (p != NULL && (p[1] == ' ') && (p[2] == 'Z' || p[2] == 'X'))
        return 0; /* exited: a zombie waiting for its parent is gone for us */
    for (int field = 2; p != NULL && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* 1 when pid is QEMU for the VM id, started at starttime. */
static int pid_is_ours(pid_t pid, const char *id, unsigned long long starttime)
{
    if (pid <= 0 || (starttime != 0 && proc_starttime(pid) != starttime))
        return 0;
    char path[64], cmd[8192], want[VMM_ID_MAX + 16];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    long n = vmm__read_file(path, cmd, sizeof(cmd));
    if (n <= 0)
        return 0;
    snprintf(want, sizeof(want), "sbx-vmm-%s", id);
    int named = 0, qemu = strstr(cmd, "qemu-system") != NULL;
    for (long i = 0; i < n; i += (long)strlen(cmd + i) + 1)
        if (strcmp(cmd + i, "-name") == 0 && i + 6 < n && strcmp(cmd + i + 6, want) == 0)
            named = 1;
    return named && qemu;
}

typedef struct {
    pid_t pid;
    unsigned long long starttime;
    char cg[3][VMM_PATH_MAX];
    int ncg;
} meta_t;

static int meta_read(const char *dir, meta_t *m)
{
    char path[VMM_PATH_MAX], buf[16384];
    memset(m, 0, sizeof(*m));
    if (vmm__path(path, sizeof(path), "%s/meta.json", dir) != 0 || vmm__read_file(path, buf, sizeof(buf)) <= 0)
        return SBX_ENOTFOUND;
    json_object *o = json_tokener_parse(buf), *v;
    if (o == NULL)
        return SBX_EINVAL;
    if (json_object_object_get_ex(o, "pid", &v))
        m->pid = (pid_t)json_object_get_int(v);
    if (json_object_object_get_ex(o, "starttime", &v))
        m->starttime = (unsigned long long)json_object_get_int64(v);
    if (json_object_object_get_ex(o, "cgroups", &v) && json_object_is_type(v, json_type_array))
        for (size_t i = 0; i < json_object_array_length(v) && m->ncg < 3; i++) {
            const char *d = json_object_get_string(json_object_array_get_idx(v, i));
            if (d != NULL && strncmp(d, "/sys/fs/cgroup/", 15) == 0 && strstr(d, "..") == NULL)
                snprintf(m->cg[m->ncg++], VMM_PATH_MAX, "%s", d);
        }
    json_object_put(o);
    return 0;
}

/* The machine a VM's saved state needs again (vmm_state_save): the kernel, the
 * initramfs (named by its agent's hash) and the command line it booted with. */
typedef struct {
    const char *release, *initrd, *append;
} machine_t;

static int meta_write(const char *dir, const vmm_spec_t *spec, const vmm_config_t *cfg, pid_t pid, const cg_t *cg,
                      const machine_t *mc)
{
    char path[VMM_PATH_MAX];
    json_object *o = json_object_new_object(), *a = json_object_new_array();
    json_object_object_add(o, "release", json_object_new_string(mc->release));
    json_object_object_add(o, "initrd", json_object_new_string(mc->initrd));
    json_object_object_add(o, "append", json_object_new_string(mc->append));
    json_object_object_add(o, "ndisks", json_object_new_int((int)spec->ndisks));
    json_object_object_add(o, "id", json_object_new_string(spec->id));
    json_object_object_add(o, "pid", json_object_new_int(pid));
    json_object_object_add(o, "starttime", json_object_new_int64((int64_t)proc_starttime(pid)));
    json_object_object_add(o, "vcpus", json_object_new_int((int)spec->vcpus));
    json_object_object_add(o, "memory_mb", json_object_new_int((int)spec->memory_mb));
    json_object_object_add(o, "disk_bytes", json_object_new_int64((int64_t)spec->disk_bytes));
    json_object_object_add(o, "accel", json_object_new_string(vmm_accel_name(cfg->accel)));
    json_object_object_add(o, "base_disk", json_object_new_string(spec->base_disk));
    json_object_object_add(o, "cgroup_note", json_object_new_string(cg->note));
    for (int i = 0; i < cg->n; i++)
        json_object_array_add(a, json_object_new_string(cg->dir[i]));
    json_object_object_add(o, "cgroups", a);
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
    int rc = vmm__path(path, sizeof(path), "%s/meta.json", dir);
    if (rc == 0)
        rc = vmm__write_file(path, s, strlen(s), 0600);
    json_object_put(o);
    return rc;
}

/* The user QEMU runs as. */
int vmm__run_as(const vmm_config_t *cfg, uid_t *uid, gid_t *gid, char *why)
{
    const char *name = cfg->run_as;
    struct passwd *pw = getpwnam(name ? name : "sandbox-vmm");
    if (pw == NULL && name == NULL)
        pw = getpwnam("nobody");
    if (pw == NULL || pw->pw_uid == 0) {
        vmm__why(why, "no unprivileged user %s to run QEMU as", name ? name : "sandbox-vmm or nobody");
        return SBX_EUNAVAIL;
    }
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

#define ARG_MAX_N (64 + 8 * VMM_DISKS_MAX)

/* The host's TSC rate in kHz, measured over 50 ms. Under TCG the guest reads
 * the host's TSC, and its kernel's own calibration against the emulated PIT
 * fails now and then on a busy host (then, with no HPET on microvm, it
 * hangs): the kernel is told the rate instead (tsc_early_khz). */
static unsigned long tsc_khz(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC_RAW, &a);
    unsigned long long t0 = __rdtsc();
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    unsigned long long t1 = __rdtsc();
    clock_gettime(CLOCK_MONOTONIC_RAW, &b);
    double us = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
    return us > 0 ? (unsigned long)((double)(t1 - t0) / us * 1000.0) : 0;
}

/* A dotted IPv4 address (what the guest's command line may carry). */
static bool ipv4_ok(const char *s)
{
    struct in_addr a;
    return s != NULL && strlen(s) < 16 && inet_pton(AF_INET, s, &a) == 1;
}

/* Makes <state>/vms/<id>/ (0700, QEMU's user's) with its overlay over the
 * base disk (or a template's disk). SBX_ECONFLICT when it exists; on other
 * failures the caller removes the directory (*ret_made says it exists). */
static int vm_dir_make(const vmm_config_t *cfg, const vmm_spec_t *spec, const vmm_boot_extra_t *x, uid_t uid,
                       gid_t gid, const char *dir, const char *overlay, int *ret_made, char *why)
{
    char vms[VMM_PATH_MAX], size[32];
    int rc;
    if ((rc = vmm__path(vms, sizeof(vms), "%s/vms", cfg->state_dir)) != 0)
        return rc;
    mkdir(cfg->state_dir, 0711);
    mkdir(vms, 0711);
    /* QEMU's user must reach <state>/vms/<id>/ (search only, no listing) */
    struct stat sst;
    if (stat(cfg->state_dir, &sst) == 0 && !(sst.st_mode & S_IXOTH))
        chmod(cfg->state_dir, (sst.st_mode & 07777) | S_IXOTH);
    if (mkdir(dir, 0700) != 0) {
        vmm__why(why, "%s: %s", dir, errno == EEXIST ? "a VM with this id exists" : strerror(errno));
        return errno == EEXIST ? SBX_ECONFLICT : SBX_EIO;
    }
    *ret_made = 1;
    snprintf(size, sizeof(size), "%llu", (unsigned long long)spec->disk_bytes);
    const char *img_argv[] = {cfg->qemu_img ? cfg->qemu_img : "qemu-img", "create", "-q", "-f", "qcow2", "-F",
                              x->backing ? "qcow2" : "raw", "-b", x->backing ? x->backing : spec->base_disk,
                              overlay, size, NULL};
    if ((rc = vmm__run(img_argv, -1, -1, 60000, why)) != 0)
        return rc;
    if (chown(dir, uid, gid) != 0 || chown(overlay, uid, gid) != 0) {
        vmm__why(why, "chown %s: %s", dir, strerror(errno));
        return SBX_EIO;
    }
    return 0;
}

/* The guest kernel's command line (256 bytes): a template's when restoring;
 * sbx.net=GUEST/PREFIX,GATEWAY for the guest agent when the VM has a NIC. */
static void kernel_cmdline(const vmm_config_t *cfg, const vmm_spec_t *spec, const vmm_boot_extra_t *x, char *out)
{
    unsigned long khz = cfg->accel == VMM_ACCEL_KVM || x->append != NULL ? 0 : tsc_khz();
    char net[64] = "";
    if (spec->nic != NULL)
        snprintf(net, sizeof(net), " sbx.net=%s/%u,%s", spec->nic->guest, spec->nic->prefix, spec->nic->gateway);
    if (x->append != NULL)
        snprintf(out, 256, "%s", x->append); /* the restored RAM was booted with it */
    else if (khz > 0)
        snprintf(out, 256, "console=ttyS0 panic=-1 loglevel=4 rw tsc_early_khz=%lu tsc=reliable%s", khz, net);
    else
        snprintf(out, 256, "console=ttyS0 panic=-1 loglevel=4 rw%s", net);
    if (x->ret_append != NULL)
        snprintf(x->ret_append, 256, "%s", out);
}

/* Starts QEMU for the VM in dir as uid/gid, in the cgroups of cg, in its own
 * session. Returns its pid, or -1 with why. */
static pid_t qemu_spawn(const vmm_config_t *cfg, const vmm_spec_t *spec, const vmm_boot_extra_t *x,
                        const char *dir, const char *kernel, const char *initrd, const char *append, const cg_t *cg,
                        uid_t uid, gid_t gid, char *why)
{
    char sock[VMM_PATH_MAX + 64], console[VMM_PATH_MAX + 64], drive[VMM_PATH_MAX + 64], qmp[VMM_PATH_MAX + 64];
    char mem[32], smp[32], name[VMM_ID_MAX + 16], accel[64], qlog[VMM_PATH_MAX];
    snprintf(mem, sizeof(mem), "%u", spec->memory_mb);
    snprintf(smp, sizeof(smp), "%u", spec->vcpus);
    snprintf(name, sizeof(name), "sbx-vmm-%s", spec->id);
    snprintf(accel, sizeof(accel), cfg->accel == VMM_ACCEL_KVM ? "kvm" : "tcg,tb-size=%d", TCG_TB_MB);
    snprintf(sock, sizeof(sock), "socket,id=agent,path=%s/agent.sock,server=on,wait=off", dir);
    /* appended: vmm_console_trim may cut the file down under QEMU */
    snprintf(console, sizeof(console), "file,id=con,path=%s/console.log,append=on", dir);
    snprintf(drive, sizeof(drive), "id=root,file=%s/overlay.qcow2,format=qcow2,if=none,discard=unmap", dir);
    /* QMP for the driver alone (QEMU's user owns the socket; the guest has no way to it) */
    snprintf(qmp, sizeof(qmp), "unix:%s/qmp.sock,server=on,wait=off", dir);
    /* microvm: virtio-mmio only; the PIT is kept because TCG guests calibrate the TSC with it */
    const char *argv[ARG_MAX_N] = {
        qemu_bin(cfg), "-name", name, "-M", "microvm,pit=on,pic=on,rtc=on,isa-serial=on",
        "-accel", accel, "-cpu", cfg->accel == VMM_ACCEL_KVM ? "host" : "max",
        "-nodefaults", "-no-user-config", "-nographic", "-nic", "none",
        "-m", mem, "-smp", smp, "-kernel", kernel, "-initrd", initrd,
        "-append", append,
        "-chardev", console, "-serial", "chardev:con",
        "-drive", drive, "-device", "virtio-blk-device,drive=root",
        "-device", "virtio-serial-device,max_ports=2", "-chardev", sock,
        "-device", "virtserialport,chardev=agent,name=sbx.agent",
        "-no-reboot",
        "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-qmp", qmp,
        NULL};
    size_t na = 0;
    while (argv[na] != NULL)
        na++;
    /* data disks: fds 4+2i (as given) and 5+2i (read-only) in QEMU, fd set
     * 1+i (qemu_open takes /dev/fdset/N for a file name and dups the fd of
     * the access it asks for: read-only to probe, then read-write) */
    char addfd[VMM_DISKS_MAX][2][48], vdrive[VMM_DISKS_MAX][96], vdev[VMM_DISKS_MAX][80];
    for (unsigned i = 0; i < spec->ndisks; i++) {
        snprintf(addfd[i][0], sizeof(addfd[i][0]), "fd=%u,set=%u", 4 + 2 * i, 1 + i);
        snprintf(addfd[i][1], sizeof(addfd[i][1]), "fd=%u,set=%u", 5 + 2 * i, 1 + i);
        snprintf(vdrive[i], sizeof(vdrive[i]), "id=vol%u,file=/dev/fdset/%u,format=raw,if=none,readonly=%s", i,
                 1 + i, spec->disks[i].read_only ? "on" : "off");
        snprintf(vdev[i], sizeof(vdev[i]), "virtio-blk-device,drive=vol%u,serial=sbxvol%u", i, i);
        argv[na++] = "-add-fd";
        argv[na++] = addfd[i][0];
        argv[na++] = "-add-fd";
        argv[na++] = addfd[i][1];
        argv[na++] = "-drive";
        argv[na++] = vdrive[i];
        argv[na++] = "-device";
        argv[na++] = vdev[i];
    }
    /* the NIC: its tap's fd at 4+2*ndisks in QEMU (which finds that the
     * tap was opened without a vnet header) */
    char netdev[64];
    if (spec->nic != NULL) {
        snprintf(netdev, sizeof(netdev), "tap,id=net0,fd=%u", 4 + 2 * spec->ndisks);
        argv[na++] = "-netdev";
        argv[na++] = netdev;
        argv[na++] = "-device";
        argv[na++] = "virtio-net-device,netdev=net0";
    }
    int mig_fd = -1;
    if (x->incoming != NULL) {
        /* the saved state on fd 3: no exec: migration (spawn=deny) and no file: URI in QEMU 7.2 */
        mig_fd = open(x->incoming, O_RDONLY | O_CLOEXEC);
        if (mig_fd < 0) {
            vmm__why(why, "open %s: %s", x->incoming, strerror(errno));
            return -1;
        }
        argv[na++] = "-incoming";
        argv[na++] = "fd:3";
    }
    vmm__path(qlog, sizeof(qlog), "%s/qemu.log", dir);
    int logfd = open(qlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        for (int i = 0; i < cg->n; i++)
            if (put_file(cg->dir[i], "cgroup.procs", "0") != 0)
                _exit(126);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd >= 0 ? logfd : nul, 1);
        dup2(logfd >= 0 ? logfd : nul, 2);
        /* dup2 clears close-on-exec, but not when the fd is 3 already */
        if (mig_fd >= 0 && (mig_fd == 3 ? fcntl(3, F_SETFD, 0) != 0 : dup2(mig_fd, 3) != 3))
            _exit(126);
        /* the disks to 4.. by way of copies above them (a disk's fd may be
         * one of the targets) */
        int high[VMM_DISKS_MAX][2], nic_high = -1;
        if (spec->nic != NULL && (nic_high = fcntl(spec->nic->fd, F_DUPFD_CLOEXEC, 64)) < 0)
            _exit(126);
        for (unsigned i = 0; i < spec->ndisks; i++) {
            char self[64];
            snprintf(self, sizeof(self), "/proc/self/fd/%d", spec->disks[i].fd);
            int ro = open(self, O_RDONLY | O_CLOEXEC);
            if (ro < 0 || (high[i][0] = fcntl(spec->disks[i].fd, F_DUPFD_CLOEXEC, 64)) < 0 ||
                (high[i][1] = fcntl(ro, F_DUPFD_CLOEXEC, 64)) < 0)
                _exit(126);
            close(ro); /* it may sit on a target below */
        }
        for (unsigned i = 0; i < spec->ndisks; i++)
            for (int k = 0; k < 2; k++)
                if (dup2(high[i][k], 4 + 2 * (int)i + k) != 4 + 2 * (int)i + k)
                    _exit(126);
        int nic_at = 4 + 2 * (int)spec->ndisks;
        if (nic_high >= 0 && dup2(nic_high, nic_at) != nic_at)
            _exit(126);
        /* stdio, the saved state, the disks and the tap only: QEMU runs a hostile guest */
        if (mig_fd < 0)
            close(3);
        fd_close_from(nic_high >= 0 ? nic_at + 1 : spec->ndisks > 0 ? 4 + 2 * (int)spec->ndisks : mig_fd >= 0 ? 4 : 3);
        if (chdir(dir) != 0 || drop_to(uid, gid, cfg->accel == VMM_ACCEL_KVM) != 0)
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid < 0)
        vmm__why(why, "fork: %s", strerror(errno));
    if (logfd >= 0)
        close(logfd);
    if (mig_fd >= 0)
        close(mig_fd);
    return pid;
}

int vmm__boot(const vmm_config_t *cfg, const vmm_spec_t *spec, const vmm_boot_extra_t *x, vmm_t **ret_vm,
              char *ret_why)
{
    char dir[VMM_PATH_MAX], kernel[VMM_PATH_MAX], release[128], initrd[VMM_PATH_MAX], vmlinux[VMM_PATH_MAX];
    char overlay[VMM_PATH_MAX], pidf[VMM_PATH_MAX], pidtxt[32], append[256];
    uid_t uid;
    gid_t gid;
    cg_t cg = {.n = 0};
    vmm_t *vm = NULL;
    int rc, made = 0;
    if (spec == NULL || !vmm__id_ok(spec->id) || spec->base_disk == NULL || spec->vcpus < 1 || spec->vcpus > 64 ||
        spec->memory_mb < 64 || spec->memory_mb > 65536 || spec->disk_bytes < (64ull << 20) ||
        spec->ndisks > VMM_DISKS_MAX || (spec->ndisks > 0 && (spec->disks == NULL || x->incoming != NULL)) ||
        (spec->nic != NULL && (spec->nic->fd < 0 || x->incoming != NULL || spec->nic->prefix < 8 ||
                               spec->nic->prefix > 30 || !ipv4_ok(spec->nic->guest) ||
                               !ipv4_ok(spec->nic->gateway)))) {
        vmm__why(ret_why, "bad VM spec (id, base disk, 1..64 vcpus, 64..65536 MiB, disk >= 64 MiB, at most %d data "
                 "disks and those and a NIC on a cold boot)", VMM_DISKS_MAX);
        return SBX_EINVAL;
    }
    if ((rc = vmm_kernel_find(cfg, kernel, sizeof(kernel), release, sizeof(release), ret_why)) != 0 ||
        (rc = vmm_initramfs_ensure(cfg, initrd, sizeof(initrd), ret_why)) != 0 ||
        (rc = vmm__run_as(cfg, &uid, &gid, ret_why)) != 0 ||
        (rc = vmm__vm_dir(cfg, spec->id, dir, sizeof(dir))) != 0 ||
        (rc = vmm__path(overlay, sizeof(overlay), "%s/overlay.qcow2", dir)) != 0)
        return rc;
    if (vmm_kernel_boot_image(cfg, kernel, release, vmlinux, sizeof(vmlinux), NULL) == 0)
        snprintf(kernel, sizeof(kernel), "%s", vmlinux);
    if ((rc = vm_dir_make(cfg, spec, x, uid, gid, dir, overlay, &made, ret_why)) != 0)
        goto fail;
    cg_make(&cg, spec->id, spec);
    kernel_cmdline(cfg, spec, x, append);
    pid_t pid = qemu_spawn(cfg, spec, x, dir, kernel, initrd, append, &cg, uid, gid, ret_why);
    if (pid < 0) {
        rc = SBX_EIO;
        goto fail;
    }
    snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)pid);
    vmm__path(pidf, sizeof(pidf), "%s/qemu.pid", dir);
    vmm__write_file(pidf, pidtxt, strlen(pidtxt), 0600);
    meta_write(dir, spec, cfg, pid, &cg, &(machine_t){.release = release, .initrd = initrd, .append = append});
    vm = calloc(1, sizeof(*vm));
    if (vm == NULL) {
        rc = SBX_ENOMEM;
        goto fail;
    }
    vm->fd = -1;
    vm->pid = pid;
    snprintf(vm->id, sizeof(vm->id), "%s", spec->id);
    snprintf(vm->dir, sizeof(vm->dir), "%s", dir);
    snprintf(vm->cgnote, sizeof(vm->cgnote), "%s", cg.note);
    if ((rc = vmm__agent_connect(vm, spec->boot_timeout_ms > 0 ? spec->boot_timeout_ms : SBX_VMM_BOOT_TIMEOUT_MS,
                                 ret_why)) != 0)
        goto fail;
    *ret_vm = vm;
    return 0;
fail:
    if (ret_why != NULL && vm != NULL) {
        /* QEMU's own complaint says more than "no answer" */
        char qlog[VMM_PATH_MAX], qerr[512];
        vmm__path(qlog, sizeof(qlog), "%s/qemu.log", dir);
        if (vmm__read_file(qlog, qerr, sizeof(qerr)) > 0 && qerr[0] != '\0') {
            qerr[strcspn(qerr, "\n")] = '\0';
            size_t l = strlen(ret_why);
            snprintf(ret_why + l, VMM_WHY_MAX - l, " (qemu: %s)", qerr);
        }
    }
    vmm__free(vm);
    if (made)
        vmm_destroy(cfg, spec->id, NULL);
    cg_remove(cg.dir, cg.n);
    return rc;
}

int vmm_boot(const vmm_config_t *cfg, const vmm_spec_t *spec, vmm_t **ret_vm, char *ret_why)
{
    vmm_boot_extra_t x = {0};
    char backing[VMM_PATH_MAX], state[VMM_PATH_MAX], append[256];
    if (spec != NULL && spec->template_dir != NULL) {
        char path[VMM_PATH_MAX];
        if (vmm__path(backing, sizeof(backing), "%s/disk.qcow2", spec->template_dir) != 0 ||
            vmm__path(state, sizeof(state), "%s/state.mig", spec->template_dir) != 0 ||
            vmm__path(path, sizeof(path), "%s/append", spec->template_dir) != 0 ||
            vmm__read_file(path, append, sizeof(append)) <= 0 || access(state, R_OK) != 0) {
            vmm__why(ret_why, "no template in %s", spec->template_dir);
            return SBX_ENOTFOUND;
        }
        x.backing = backing;
        x.incoming = state;
        x.append = append;
    } else if (spec != NULL && spec->backing != NULL) {
        x.backing = spec->backing;
    }
    return vmm__boot(cfg, spec, &x, ret_vm, ret_why);
}

int vmm_attach(const vmm_config_t *cfg, const char *id, long timeout_ms, vmm_t **ret_vm, char *ret_why)
{
    char dir[VMM_PATH_MAX];
    meta_t m;
    int rc = vmm__vm_dir(cfg, id, dir, sizeof(dir));
    if (rc != 0) {
        vmm__why(ret_why, "bad VM id");
        return rc;
    }
    if (meta_read(dir, &m) != 0 || !pid_is_ours(m.pid, id, m.starttime)) {
        vmm__why(ret_why, "VM %s is not running", id);
        return SBX_ENOTFOUND;
    }
    vmm_t *vm = calloc(1, sizeof(*vm));
    if (vm == NULL)
        return SBX_ENOMEM;
    vm->fd = -1;
    vm->pid = m.pid;
    snprintf(vm->id, sizeof(vm->id), "%s", id);
    snprintf(vm->dir, sizeof(vm->dir), "%s", dir);
    char buf[16384];
    char path[VMM_PATH_MAX];
    vmm__path(path, sizeof(path), "%s/meta.json", dir);
    if (vmm__read_file(path, buf, sizeof(buf)) > 0) {
        json_object *o = json_tokener_parse(buf), *v;
        if (json_object_object_get_ex(o, "cgroup_note", &v))
            snprintf(vm->cgnote, sizeof(vm->cgnote), "%s", json_object_get_string(v));
        json_object_put(o);
    }
    if ((rc = vmm__agent_connect(vm, timeout_ms, ret_why)) != 0) {
        vmm__free(vm);
        return rc;
    }
    *ret_vm = vm;
    return 0;
}

int vmm_list(const vmm_config_t *cfg, vmm_info_t **ret, size_t *ret_n)
{
    char vms[VMM_PATH_MAX];
    vmm_info_t *out = NULL;
    size_t n = 0, cap = 0;
    if (vmm__path(vms, sizeof(vms), "%s/vms", cfg->state_dir) != 0)
        return SBX_ETOOBIG;
    DIR *d = opendir(vms);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char dir[VMM_PATH_MAX];
        if (!vmm__id_ok(e->d_name) || vmm__vm_dir(cfg, e->d_name, dir, sizeof(dir)) != 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            vmm_info_t *np = realloc(out, cap * sizeof(*out));
            if (np == NULL) {
                closedir(d);
                free(out);
                return SBX_ENOMEM;
            }
            out = np;
        }
        meta_t m;
        memset(&out[n], 0, sizeof(out[n]));
        if (vmm__path(out[n].id, sizeof(out[n].id), "%s", e->d_name) != 0)
            continue;
        if (meta_read(dir, &m) == 0 && pid_is_ours(m.pid, e->d_name, m.starttime)) {
            out[n].pid = m.pid;
            out[n].running = 1;
        }
        n++;
    }
    if (d != NULL)
        closedir(d);
    *ret = out;
    *ret_n = n;
    return 0;
}

/* Cuts one VM's console.log (in the directory dfd, QEMU's user's) to its
 * last SBX_VMM_CONSOLE_KEEP bytes once it is past SBX_VMM_CONSOLE_MAX. The
 * file is QEMU's, which runs a hostile guest: no symlink is followed, and
 * only a regular file of QEMU's user with one link is touched. 1 when cut. */
static int console_trim_one(int dfd, uid_t uid)
{
    static const char mark[] = "\n[sandbox-vmm: earlier console output dropped: the console log is kept to its "
                               "last bytes]\n";
    int fd = openat(dfd, "console.log", O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    int cut = 0;
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1 ||
        st.st_size <= (off_t)SBX_VMM_CONSOLE_MAX)
        goto done;
    char *keep = malloc(SBX_VMM_CONSOLE_KEEP);
    if (keep == NULL)
        goto done;
    ssize_t n = pread(fd, keep, SBX_VMM_CONSOLE_KEEP, st.st_size - (off_t)SBX_VMM_CONSOLE_KEEP);
    /* QEMU appends (append=on): what it writes meanwhile lands after the
     * kept tail or is lost with the cut, a console line at most */
    if (n > 0 && pwrite(fd, mark, sizeof mark - 1, 0) == (ssize_t)(sizeof mark - 1) &&
        pwrite(fd, keep, (size_t)n, (off_t)(sizeof mark - 1)) == n &&
        ftruncate(fd, (off_t)(sizeof mark - 1) + n) == 0)
        cut = 1;
    free(keep);
done:
    close(fd);
    return cut;
}

int vmm_console_trim(const vmm_config_t *cfg)
{
    char vms[VMM_PATH_MAX];
    uid_t uid;
    gid_t gid;
    char why[VMM_WHY_MAX];
    int cut = 0;
    if (vmm__path(vms, sizeof(vms), "%s/vms", cfg->state_dir) != 0 || vmm__run_as(cfg, &uid, &gid, why) != 0)
        return 0;
    DIR *d = opendir(vms);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (!vmm__id_ok(e->d_name))
            continue;
        int dfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            continue;
        cut += console_trim_one(dfd, uid);
        close(dfd);
    }
    if (d != NULL)
        closedir(d);
    return cut;
}

int vmm_freeze(const vmm_config_t *cfg, const char *id, bool frozen, char *ret_why)
{
    char dir[VMM_PATH_MAX];
    meta_t m;
    if (vmm__vm_dir(cfg, id, dir, sizeof(dir)) != 0) {
        vmm__why(ret_why, "bad VM id");
        return SBX_EINVAL;
    }
    if (meta_read(dir, &m) != 0 || !pid_is_ours(m.pid, id, m.starttime)) {
        vmm__why(ret_why, "the QEMU of VM %s is not running", id);
        return SBX_ENOTFOUND;
    }
    if (kill(m.pid, frozen ? SIGSTOP : SIGCONT) != 0) {
        vmm__why(ret_why, "signal QEMU %d: %s", (int)m.pid, strerror(errno));
        return SBX_EIO;
    }
    return 0;
}

int vmm_destroy(const vmm_config_t *cfg, const char *id, char *ret_why)
{
    char dir[VMM_PATH_MAX];
    meta_t m;
    if (vmm__vm_dir(cfg, id, dir, sizeof(dir)) != 0) {
        vmm__why(ret_why, "bad VM id");
        return SBX_EINVAL;
    }
    if (meta_read(dir, &m) == 0 && pid_is_ours(m.pid, id, m.starttime)) {
        kill(m.pid, SIGKILL);
        for (int i = 0; i < 250 && proc_starttime(m.pid) == m.starttime; i++) {
            waitpid(m.pid, NULL, WNOHANG); /* our child when this driver booted it */
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (proc_starttime(m.pid) == m.starttime) {
            vmm__why(ret_why, "QEMU %d of VM %s did not die", (int)m.pid, id);
            return SBX_EIO;
        }
    }
    cg_remove(m.cg, m.ncg);
    if (vmm__rm_tree(dir) != 0) {
        vmm__why(ret_why, "remove %s: %s", dir, strerror(errno));
        return SBX_EIO;
    }
    return 0;
}

int vmm_frozen(const vmm_config_t *cfg, const char *id)
{
    char dir[VMM_PATH_MAX], path[64], st[512];
    meta_t m;
    if (vmm__vm_dir(cfg, id, dir, sizeof(dir)) != 0 || meta_read(dir, &m) != 0 ||
        !pid_is_ours(m.pid, id, m.starttime))
        return SBX_ENOTFOUND;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)m.pid);
    if (vmm__read_file(path, st, sizeof(st)) <= 0)
        return SBX_ENOTFOUND;
    const char *p = strrchr(st, ')'); /* the name may hold anything */
    return p != NULL && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

int vmm_disk_save(const vmm_config_t *cfg, const char *id, const char *out_path, long long *ret_bytes,
                  char *ret_why)
{
    char dir[VMM_PATH_MAX], overlay[VMM_PATH_MAX], tmp[VMM_PATH_MAX];
    int rc;
    if ((rc = vmm__vm_dir(cfg, id, dir, sizeof(dir))) != 0 ||
        (rc = vmm__path(overlay, sizeof(overlay), "%s/overlay.qcow2", dir)) != 0 ||
        (rc = vmm__path(tmp, sizeof(tmp), "%s.part", out_path)) != 0) {
        vmm__why(ret_why, "bad VM id or path");
        return rc;
    }
    if (access(overlay, R_OK) != 0) {
        vmm__why(ret_why, "VM %s has no disk", id);
        return SBX_ENOTFOUND;
    }
    /* -U: the running (frozen) QEMU holds the image's lock */
    const char *argv[] = {cfg->qemu_img ? cfg->qemu_img : "qemu-img", "convert", "-U", "-O", "qcow2", overlay, tmp,
                          NULL};
    unlink(tmp);
    if ((rc = vmm__run(argv, -1, -1, 600000, ret_why)) != 0) {
        unlink(tmp);
        return rc;
    }
    /* QEMU's user reads it as a later VM's backing file; no one else */
    struct stat sb, db;
    if (stat(dir, &db) != 0 || chown(tmp, db.st_uid, db.st_gid) != 0 || chmod(tmp, 0600) != 0 ||
        stat(tmp, &sb) != 0 || rename(tmp, out_path) != 0) {
        vmm__why(ret_why, "%s: %s", out_path, strerror(errno));
        unlink(tmp);
        return SBX_EIO;
    }
    if (ret_bytes != NULL)
        *ret_bytes = (long long)sb.st_blocks * 512;
    return 0;
}
