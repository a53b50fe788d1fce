/* sbx-vmmctl: a small program over worker/vmm (vmm.h) for tests, benchmarks
 * and by-hand use: probe, boot, exec, files, shell, dial, list, destroy. Each
 * call attaches to the VM by id under --state, so VMs outlive it. Exit codes:
 * 0 ok, 1 failure (one line on stderr), 2 usage; exec and shell exit with the
 * guest command's code (128+signal; 124 when --timeout killed it). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "limits.h"
#include "vmm.h"

static const char usage[] =
    "usage: sbx-vmmctl [--state DIR] [--agent PATH] [--accel auto|kvm|tcg] COMMAND ...\n"
    "  probe                              say whether KVM works (else TCG) and why\n"
    "  boot ID --image IMAGE [--memory MB] [--cpus N] [--disk BYTES] [--docker SOCK] [--template]\n"
    "                                     export IMAGE from Docker (cached), boot a VM\n"
    "                                     (--template: restore a saved booted template, made at first use)\n"
    "        [--nic TAP,HOST,GUEST,PREFIX]  a NIC on a new tap TAP (HOST/PREFIX its address, GUEST the guest's)\n"
    "  exec ID [--timeout MS] [--max BYTES] [--stdin] -- ARGV...\n"
    "  put ID DIR                         unpack a tar stream from stdin into DIR\n"
    "  get ID PATH                        write a tar stream of PATH to stdout\n"
    "  shell ID [--rows N --cols N] -- ARGV...   run ARGV on a PTY, stdin/stdout relayed\n"
    "  dial ID PORT                       relay stdin/stdout to 127.0.0.1:PORT in the guest\n"
    "  mux ID PORT                        one connection, two sessions at once: a PTY running cat\n"
    "                                     and a dial to PORT, written and read interleaved\n"
    "  list                               VMs under the state dir (id, pid, running)\n"
    "  destroy ID                         kill the VM's QEMU, remove its files\n";

static void die(const char *what, const char *why)
{
    fprintf(stderr, "sbx-vmmctl: %s: %s\n", what, why && why[0] ? why : "failed");
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned long long num(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "sbx-vmmctl: %s: not a number: %s\n", what, s);
        exit(2);
    }
    return v;
}

static vmm_t *attach(const vmm_config_t *cfg, const char *id)
{
    char why[VMM_WHY_MAX] = "";
    vmm_t *vm = NULL;
    if (vmm_attach(cfg, id, 30000, &vm, why) != 0)
        die("attach", why);
    return vm;
}

static void on_output(void *arg, int stream, const void *p, size_t n)
{
    (void)arg;
    fwrite(p, 1, n, stream == 2 ? stderr : stdout);
}

static int cmd_boot(vmm_config_t *cfg, int argc, char **argv)
{
    const char *id = argv[0], *image = NULL, *sock = NULL;
    int use_template = 0;
    const char *nic_arg = NULL;
    vmm_spec_t spec = {.id = id, .vcpus = 1, .memory_mb = 256, .disk_bytes = 1ull << 30};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--image") == 0 && i + 1 < argc) image = argv[++i];
        else if (strcmp(argv[i], "--memory") == 0 && i + 1 < argc) spec.memory_mb = (unsigned)num(argv[++i], "--memory");
        else if (strcmp(argv[i], "--cpus") == 0 && i + 1 < argc) spec.vcpus = (unsigned)num(argv[++i], "--cpus");
        else if (strcmp(argv[i], "--disk") == 0 && i + 1 < argc) spec.disk_bytes = num(argv[++i], "--disk");
        else if (strcmp(argv[i], "--docker") == 0 && i + 1 < argc) sock = argv[++i];
        else if (strcmp(argv[i], "--template") == 0) use_template = 1;
        else if (strcmp(argv[i], "--nic") == 0 && i + 1 < argc) nic_arg = argv[++i];
        else { fputs(usage, stderr); return 2; }
    }
    if (image == NULL) {
        fputs(usage, stderr);
        return 2;
    }
    char why[VMM_WHY_MAX] = "", base[VMM_PATH_MAX], iid[80];
    double t0 = now_s();
    /* the image id keys the base disk: ask Docker for it by exporting into a temp file */
    char tmpl[] = "/tmp/sbx-vmm-export.XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
        die("export", strerror(errno));
    unlink(tmpl);
    if (vmm_docker_export(sock, image, fd, iid, why) != 0)
        die("export", why);
    lseek(fd, 0, SEEK_SET);
    if (vmm_image_prepare(cfg, iid, fd, spec.disk_bytes, base, sizeof(base), why) != 0)
        die("image", why);
    close(fd);
    double t1 = now_s();
    spec.base_disk = base;
    char tdir[VMM_PATH_MAX];
    if (use_template) {
        if (vmm_template_ensure(cfg, &spec, tdir, sizeof(tdir), why) != 0)
            die("template", why);
        spec.template_dir = tdir;
        t1 = now_s();
    }
    vmm_nic_t nic = {.fd = -1};
    if (nic_arg != NULL) {
        char tap[32];
        if (sscanf(nic_arg, "%31[a-z0-9],%15[0-9.],%15[0-9.],%u", tap, nic.gateway, nic.guest, &nic.prefix) != 4) {
            fputs(usage, stderr);
            return 2;
        }
        if (vmm_tap_open(tap, nic.gateway, nic.prefix, &nic.fd, why) != 0)
            die("tap", why);
        spec.nic = &nic;
    }
    vmm_t *vm = NULL;
    if (vmm_boot(cfg, &spec, &vm, why) != 0)
        die("boot", why);
    if (nic.fd >= 0)
        close(nic.fd); /* QEMU holds the tap now */
    double t2 = now_s();
    printf("id %s\npid %d\naccel %s\nguest_kernel %s\ncgroup %s\nimage_s %.3f\n%s %.3f\n", id, (int)vmm_pid(vm),
           vmm_accel_name(cfg->accel), vmm_guest_release(vm), vmm_cgroup_note(vm), t1 - t0,
           use_template ? "restore_s" : "boot_s", t2 - t1);
    vmm_detach(vm);
    return 0;
}

static int cmd_exec(vmm_config_t *cfg, int argc, char **argv)
{
    vmm_exec_req_t req = {.stdin_fd = -1, .on_output = on_output};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) req.timeout_ms = (long)num(argv[++i], "--timeout");
        else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) req.max_output = (size_t)num(argv[++i], "--max");
        else if (strcmp(argv[i], "--stdin") == 0) req.stdin_fd = 0;
        else { fputs(usage, stderr); return 2; }
    }
    if (i + 1 >= argc) {
        fputs(usage, stderr);
        return 2;
    }
    static const char *const env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"};
    req.cmd.argv = (const char *const *)argv + i + 1;
    req.cmd.argc = (uint32_t)(argc - i - 1);
    req.cmd.env = env;
    req.cmd.envc = 2;
    vmm_t *vm = attach(cfg, argv[0]);
    vmm_exec_result_t r;
    char why[VMM_WHY_MAX] = "";
    int rc = vmm_exec(vm, &req, &r, why);
    vmm_detach(vm);
    fflush(stdout);
    if (rc != 0)
        die("exec", why);
    if (r.truncated[1] || r.truncated[2])
        fprintf(stderr, "sbx-vmmctl: output truncated (stdout %llu bytes, stderr %llu bytes)\n",
                (unsigned long long)r.bytes[1], (unsigned long long)r.bytes[2]);
    if (r.timed_out)
        return 124;
    return r.how == VMM_EXIT_SIGNAL ? 128 + r.code : r.code;
}

/* Relays our stdin into s and s's output to our stdout until it ends. */
static int relay(vmm_session_t *s)
{
    char buf[65536];
    int in_open = 1, code = 0;
    for (;;) {
        if (in_open) {
            struct pollfd pf = {.fd = 0, .events = POLLIN};
            if (poll(&pf, 1, 0) > 0) {
                ssize_t n = read(0, buf, sizeof(buf));
                if (n <= 0) {
                    in_open = 0;
                    vmm_session_write(s, NULL, 0);
                } else if (vmm_session_write(s, buf, (size_t)n) != 0) {
                    die("session", "the agent channel broke");
                }
            }
        }
        long n = vmm_session_read(s, buf, sizeof(buf), in_open ? 10 : 1000, &code);
        if (n > 0) {
            if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
                return 1;
            fflush(stdout);
        } else if (n == 0) {
            return code;
        } else if (n != SBX_ETIMEOUT) {
            die("session", "the agent channel broke");
        }
    }
}

static int cmd_shell(vmm_config_t *cfg, int argc, char **argv)
{
    vmm_cmd_t cmd = {.rows = 24, .cols = 80, .cwd = "/"};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) cmd.rows = (uint16_t)num(argv[++i], "--rows");
        else if (strcmp(argv[i], "--cols") == 0 && i + 1 < argc) cmd.cols = (uint16_t)num(argv[++i], "--cols");
        else { fputs(usage, stderr); return 2; }
    }
    if (i + 1 >= argc) {
        fputs(usage, stderr);
        return 2;
    }
    static const char *const env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm",
                                      "HOME=/root"};
    cmd.argv = (const char *const *)argv + i + 1;
    cmd.argc = (uint32_t)(argc - i - 1);
    cmd.env = env;
    cmd.envc = 3;
    vmm_t *vm = attach(cfg, argv[0]);
    vmm_session_t *s = NULL;
    char why[VMM_WHY_MAX] = "";
    if (vmm_shell_open(vm, &cmd, &s, why) != 0)
        die("shell", why);
    int code = relay(s);
    vmm_session_close(s);
    vmm_detach(vm);
    return code;
}

static int cmd_dial(vmm_config_t *cfg, int argc, char **argv)
{
    if (argc != 2) {
        fputs(usage, stderr);
        return 2;
    }
    unsigned port = (unsigned)num(argv[1], "PORT");
    vmm_t *vm = attach(cfg, argv[0]);
    vmm_session_t *s = NULL;
    char why[VMM_WHY_MAX] = "";
    if (vmm_dial(vm, port, &s, why) != 0)
        die("dial", why);
    relay(s);
    vmm_session_close(s);
    vmm_detach(vm);
    return 0;
}

/* Reads s until want appears in what it sent (or 30 s pass); 0 when it did. */
static int read_until(vmm_session_t *s, const char *want, char *acc, size_t cap)
{
    size_t n = strlen(acc);
    for (int i = 0; i < 300 && strstr(acc, want) == NULL; i++) {
        int code;
        long r = vmm_session_read(s, acc + n, cap - 1 - n, 100, &code);
        if (r > 0)
            n += (size_t)r;
        else if (r != SBX_ETIMEOUT)
            break;
        acc[n] = '\0';
    }
    return strstr(acc, want) ? 0 : -1;
}

/* Two sessions on one connection, each answered while the other is open. */
static int cmd_mux(vmm_config_t *cfg, int argc, char **argv)
{
    if (argc != 2) {
        fputs(usage, stderr);
        return 2;
    }
    unsigned port = (unsigned)num(argv[1], "PORT");
    vmm_t *vm = attach(cfg, argv[0]);
    vmm_session_t *pty = NULL, *dial = NULL;
    char why[VMM_WHY_MAX] = "", a[8192] = "", b[8192] = "";
    static const char *const sh[] = {"cat"};
    vmm_cmd_t cmd = {.argv = sh, .argc = 1, .cwd = "/", .rows = 24, .cols = 80};
    if (vmm_shell_open(vm, &cmd, &pty, why) != 0)
        die("mux: shell", why);
    if (vmm_dial(vm, port, &dial, why) != 0)
        die("mux: dial", why);
    static const char req[] = "GET /index.html HTTP/1.0\r\n\r\n";
    if (vmm_session_write(pty, "first-line\n", 11) != 0 || vmm_session_write(dial, req, sizeof(req) - 1) != 0)
        die("mux", "write");
    if (read_until(dial, "200 OK", b, sizeof(b)) != 0)
        die("mux: dial", "no HTTP answer while the PTY was open");
    if (read_until(pty, "first-line", a, sizeof(a)) != 0)
        die("mux: pty", "no echo while the dial was open");
    if (vmm_session_write(pty, "second-line\n", 12) != 0 || read_until(pty, "second-line", a, sizeof(a)) != 0)
        die("mux: pty", "no second echo");
    printf("mux ok: pty and dial on one connection\n");
    vmm_session_close(dial);
    vmm_session_close(pty);
    vmm_detach(vm);
    return 0;
}

int main(int argc, char **argv)
{
    static char agent[VMM_PATH_MAX];
    vmm_config_t cfg = {.state_dir = "/var/lib/sandbox/vmm"};
    const char *accel = "auto";
    /* the agent is built beside this program */
    ssize_t n = readlink("/proc/self/exe", agent, sizeof(agent) - 32);
    if (n > 0) {
        agent[n] = '\0';
        char *slash = strrchr(agent, '/');
        snprintf(slash + 1, sizeof(agent) - (size_t)(slash + 1 - agent), "sbx-vmm-agent");
        cfg.agent = agent;
    }
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fputs(usage, stderr);
            return 2;
        }
        if (strcmp(argv[i], "--state") == 0) cfg.state_dir = argv[i + 1];
        else if (strcmp(argv[i], "--agent") == 0) cfg.agent = argv[i + 1];
        else if (strcmp(argv[i], "--accel") == 0) accel = argv[i + 1];
        else { fputs(usage, stderr); return 2; }
    }
    if (i >= argc) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[i];
    argc -= i + 1;
    argv += i + 1;
    char why[VMM_WHY_MAX] = "";
    if (strcmp(cmd, "probe") == 0 || (strcmp(cmd, "boot") == 0 && strcmp(accel, "auto") == 0)) {
        if (vmm_probe(&cfg, &cfg.accel, why) != 0)
            die("probe", why);
        if (strcmp(cmd, "probe") == 0) {
            printf("%s\n%s\n", vmm_accel_name(cfg.accel), why);
            return 0;
        }
    } else {
        cfg.accel = strcmp(accel, "kvm") == 0 ? VMM_ACCEL_KVM : VMM_ACCEL_TCG;
    }
    if (strcmp(cmd, "list") == 0) {
        vmm_info_t *l = NULL;
        size_t nl = 0;
        if (vmm_list(&cfg, &l, &nl) != 0)
            die("list", "cannot read the state dir");
        for (size_t k = 0; k < nl; k++)
            printf("%s %d %s\n", l[k].id, (int)l[k].pid, l[k].running ? "running" : "stopped");
        free(l);
        return 0;
    }
    if (argc < 1) {
        fputs(usage, stderr);
        return 2;
    }
    if (strcmp(cmd, "boot") == 0)
        return cmd_boot(&cfg, argc, argv);
    if (strcmp(cmd, "exec") == 0)
        return cmd_exec(&cfg, argc, argv);
    if (strcmp(cmd, "shell") == 0)
        return cmd_shell(&cfg, argc, argv);
    if (strcmp(cmd, "dial") == 0)
        return cmd_dial(&cfg, argc, argv);
    if (strcmp(cmd, "mux") == 0)
        return cmd_mux(&cfg, argc, argv);
    if (strcmp(cmd, "destroy") == 0) {
        if (vmm_destroy(&cfg, argv[0], why) != 0)
            die("destroy", why);
        return 0;
    }
    if ((strcmp(cmd, "put") == 0 || strcmp(cmd, "get") == 0) && argc == 2) {
        vmm_t *vm = attach(&cfg, argv[0]);
        int rc = cmd[0] == 'p' ? vmm_files_put(vm, argv[1], 0, 600000, why) : vmm_files_get(vm, argv[1], 1, 600000, why);
        vmm_detach(vm);
        if (rc != 0)
            die(cmd, why);
        return 0;
    }
    fputs(usage, stderr);
    return 2;
}
