/* sandbox-vmm: the reference external runtime driver of Sandbox (protocol 1,
 * docs/runtime-drivers.md): class microvm, each sandbox a QEMU microvm guest
 * made by worker/vmm (docs/microvm.md). Started by a worker with
 * worker_runtime = docker,external; speaks JSON-RPC on stdin/stdout and takes
 * byte streams on $SBX_DRIVER_RUNDIR/streams.sock. Exit codes: 0 (stdin ended
 * or shutdown), 1 (cannot start: one line on stderr), 2 (usage). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmm/vmmdrv.h"

static const char usage[] =
    "usage: sandbox-vmm [--state DIR] [--agent PATH] [--docker SOCK] [--image IMAGE] [--accel auto|kvm|tcg]\n"
    "  The microVM runtime driver a worker starts (worker_driver_command); not for interactive use.\n"
    "  --state DIR    VMs, sandbox records and the image/template cache (default /var/lib/sandbox/vmm)\n"
    "  --agent PATH   the static guest agent (default: sbx-vmm-agent beside this program or in the build tree)\n"
    "  --docker SOCK  the Docker Engine socket images are exported from (default /var/run/docker.sock)\n"
    "  --image IMAGE  the image of the start-up probe's sandbox (default sandbox/busybox:latest)\n"
    "  --accel MODE   auto (KVM when it really works, else TCG), kvm or tcg\n"
    "  --version      print the version\n";

static vmmdrv_t drv;

json_object *vmmdrv_m_hello(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);

json_object *vmmdrv_m_hello(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call)
{
    json_object *protos, *o = json_object_new_object();
    int one = 0;
    if (json_object_object_get_ex(p, "protocols", &protos) && json_object_is_type(protos, json_type_array))
        for (size_t i = 0; i < json_object_array_length(protos); i++)
            one |= json_object_get_int(json_object_array_get_idx(protos, i)) == 1;
    if (!one) {
        json_object_put(o);
        return vmmdrv_fail(call, "invalid_argument", "sandbox-vmm speaks protocol 1 only");
    }
    json_object *cls = json_object_new_object(), *modes = json_object_new_array(), *classes = json_object_new_array();
    json_object_array_add(modes, json_object_new_string("none"));
    json_object_array_add(modes, json_object_new_string("restricted"));
    json_object_object_add(cls, "class", json_object_new_string("microvm"));
    json_object_object_add(cls, "network_modes", modes);
    json_object_object_add(cls, "probe", json_object_new_string(d->probe));
    json_object_object_add(cls, "accel", json_object_new_string(vmm_accel_name(d->cfg.accel)));
    json_object_array_add(classes, cls);
    json_object *caps = json_object_new_array();
    json_object_array_add(caps, json_object_new_string("files"));
    json_object_array_add(caps, json_object_new_string("shell"));
    json_object_array_add(caps, json_object_new_string("dial"));
    json_object_array_add(caps, json_object_new_string("disks"));
    json_object_array_add(caps, json_object_new_string("snapshots"));
    json_object_array_add(caps, json_object_new_string("snapshot_copy"));
    json_object_array_add(caps, json_object_new_string("nic"));
    json_object_object_add(o, "name", json_object_new_string("sandbox-vmm"));
    json_object_object_add(o, "version", json_object_new_string(VMMDRV_VERSION));
    json_object_object_add(o, "protocol", json_object_new_int(1));
    json_object_object_add(o, "classes", classes);
    json_object_object_add(o, "capabilities", caps);
    json_object_object_add(o, "accel", json_object_new_string(vmm_accel_name(d->cfg.accel)));
    return o;
}

/* The agent: beside this program (installed), else in the build tree. */
static void find_agent(vmmdrv_t *d)
{
    char self[VMM_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    static const char *const rel[] = {"sbx-vmm-agent", "../worker/vmm/sbx-vmm-agent", "../lib/sandbox/sbx-vmm-agent"};
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        if ((size_t)snprintf(d->agent, sizeof(d->agent), "%.3900s/%s", self, rel[i]) < sizeof(d->agent) &&
            access(d->agent, X_OK) == 0)
            return;
    }
    d->agent[0] = '\0';
}

static int parse_args(vmmdrv_t *d, int argc, char **argv, const char **accel)
{
    for (int i = 1; i < argc; i += 2) { /* OPTION VALUE pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            exit(0);
        } else if (strcmp(a, "--version") == 0) {
            printf("sandbox-vmm %s\n", VMMDRV_VERSION);
            exit(0);
        } else if (v == NULL) {
            fprintf(stderr, "sandbox-vmm: %.64s needs a value (see --help)\n", a);
            return 2;
        } else if (strcmp(a, "--state") == 0 && strlen(v) < 3000 && v[0] == '/') {
            snprintf(d->state_dir, sizeof(d->state_dir), "%s", v);
        } else if (strcmp(a, "--agent") == 0) {
            snprintf(d->agent, sizeof(d->agent), "%s", v);
        } else if (strcmp(a, "--docker") == 0) {
            d->docker_sock = v;
        } else if (strcmp(a, "--image") == 0) {
            d->default_image = v;
        } else if (strcmp(a, "--accel") == 0 && (!strcmp(v, "auto") || !strcmp(v, "kvm") || !strcmp(v, "tcg"))) {
            *accel = v;
        } else {
            fprintf(stderr, "sandbox-vmm: bad option or value: %.64s %.64s (see --help)\n", a, v);
            return 2;
        }
    }
    return 0;
}

/* KVM or TCG, with the probe text hello shows. 0, or 1 when QEMU cannot run. */
static int probe(vmmdrv_t *d, const char *accel)
{
    char why[VMM_WHY_MAX] = "";
    if (strcmp(accel, "auto") == 0) {
        if (vmm_probe(&d->cfg, &d->cfg.accel, why) != 0) {
            fprintf(stderr, "sandbox-vmm: QEMU cannot run: %s\n", why);
            return 1;
        }
    } else {
        d->cfg.accel = strcmp(accel, "kvm") == 0 ? VMM_ACCEL_KVM : VMM_ACCEL_TCG;
        snprintf(why, sizeof(why), "--accel %s", accel);
    }
    char kpath[VMM_PATH_MAX], rel[128];
    if (vmm_kernel_find(&d->cfg, kpath, sizeof(kpath), rel, sizeof(rel), why) != 0) {
        fprintf(stderr, "sandbox-vmm: no guest kernel: %s\n", why);
        return 1;
    }
    snprintf(d->probe, sizeof(d->probe),
             "qemu microvm, kernel %s, accel %s (%s); network none and restricted (no guest NIC; routes and shells "
             "through the agent); open only through the worker's egress filter (a NIC on a tap of its own)",
             rel, vmm_accel_name(d->cfg.accel), why);
    return 0;
}

/* Every 2 s: keeps the VMs' console logs bounded (vmm_console_trim), and
 * reaps our QEMU children that exited (a VM destroyed, a template's QEMU
 * done): only zombies named qemu*, by pid, so the library's own waits for
 * its helpers (qemu-img, mkfs) keep their statuses. */
static void *reaper(void *arg)
{
    const vmmdrv_t *drv_ = arg;
    pid_t self = getpid();
    for (;;) {
        struct timespec ts = {2, 0};
        nanosleep(&ts, NULL);
        vmm_console_trim(&drv_->cfg);
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            char path[300], buf[512];
            if (e->d_name[0] < '1' || e->d_name[0] > '9')
                continue;
            snprintf(path, sizeof(path), "/proc/%.32s/stat", e->d_name);
            FILE *f = fopen(path, "re");
            if (f == NULL)
                continue;
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            char *open = strchr(buf, '('), *close = strrchr(buf, ')');
            char state = 0;
            int ppid = 0;
            if (open && close && strncmp(open + 1, "qemu", 4) == 0 && sscanf(close + 1, " %c %d", &state, &ppid) == 2 &&
                state == 'Z' && ppid == (int)self)
                waitpid((pid_t)strtol(e->d_name, NULL, 10), NULL, WNOHANG);
        }
        if (d != NULL)
            closedir(d);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *accel = "auto";
    snprintf(drv.state_dir, sizeof(drv.state_dir), "/var/lib/sandbox/vmm");
    drv.default_image = "sandbox/busybox:latest";
    find_agent(&drv);
    int rc = parse_args(&drv, argc, argv, &accel);
    if (rc != 0)
        return rc;
    const char *rundir = getenv("SBX_DRIVER_RUNDIR");
    if (rundir == NULL || rundir[0] != '/') {
        fputs("sandbox-vmm: SBX_DRIVER_RUNDIR is not set: a worker starts this driver (docs/runtime-drivers.md)\n", stderr);
        return 1;
    }
    snprintf(drv.rundir, sizeof(drv.rundir), "%s", rundir);
    if (drv.agent[0] == '\0' || access(drv.agent, R_OK) != 0) {
        fputs("sandbox-vmm: the guest agent sbx-vmm-agent is not found (use --agent)\n", stderr);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    drv.cfg.state_dir = drv.state_dir;
    drv.cfg.agent = drv.agent;
    pthread_mutex_init(&drv.mu, NULL);
    pthread_mutex_init(&drv.build_mu, NULL);
    char dir[VMM_PATH_MAX + 16];
    mkdir(drv.state_dir, 0711);
    snprintf(dir, sizeof(dir), "%.3000s/sandboxes", drv.state_dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "sandbox-vmm: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (probe(&drv, accel) != 0)
        return 1;
    fprintf(stderr, "sandbox-vmm: %s\n", drv.probe);
    vmmdrv_vm_sweep(&drv);
    pthread_t t;
    if (pthread_create(&t, NULL, reaper, &drv) == 0)
        pthread_detach(t);
    return vmmdrv_serve(&drv);
}
