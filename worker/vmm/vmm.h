/* worker/vmm: QEMU microVMs for the microvm isolation class. Finds the
 * distribution kernel, builds the initramfs (busybox + modules + our guest
 * agent as /init), turns a container image's filesystem into an ext4 root
 * disk with a per-VM copy-on-write overlay, boots QEMU (-M microvm) as an
 * unprivileged user in a cgroup, and speaks to the guest agent over one
 * virtio-serial port (vmmproto.h). Library code: it does not log; errors come
 * back as a negative SBX_E* code and a one-line reason in ret_why buffers.
 * Not thread-safe per vmm_t: one thread drives one VM's connection. */
#ifndef SBX_VMM_H
#define SBX_VMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmmproto.h"

#define VMM_ID_MAX   64   /* a VM id: [A-Za-z0-9_-], 1..63 bytes */
#define VMM_WHY_MAX  256  /* a reason line */
#define VMM_PATH_MAX 4096

/* Where and how VMs are made; every field is borrowed for the call. */
typedef struct {
    const char *state_dir;   /* <state>: cache/ (kernel initramfs, base disks) and vms/<id>/ */
    const char *qemu;        /* NULL: qemu-system-x86_64 from PATH */
    const char *qemu_img;    /* NULL: qemu-img from PATH */
    const char *agent;       /* the static guest agent (built as sbx-vmm-agent) */
    const char *busybox;     /* NULL: /bin/busybox (must be static) */
    const char *kernel;      /* NULL: the newest /boot/vmlinuz-* with its /lib/modules */
    const char *run_as;      /* user QEMU runs as; NULL: "sandbox-vmm" if it exists, else "nobody" */
    int accel;               /* VMM_ACCEL_* from vmm_probe */
} vmm_config_t;

typedef enum { VMM_ACCEL_TCG = 0, VMM_ACCEL_KVM = 1 } vmm_accel_t;

/* "kvm" / "tcg". */
const char *vmm_accel_name(int accel);

/* Finds out whether KVM really works: /dev/kvm opens, KVM_CREATE_VM works, and
 * the guest kernel booted under -accel kvm, as QEMU's user, prints its banner
 * within 5 s (nested KVM that cannot run the guest fails there). Sets *ret_accel to KVM or
 * TCG and ret_why (VMM_WHY_MAX) to the reason ("kvm" or why not). Returns 0;
 * SBX_EUNAVAIL when QEMU itself cannot run (ret_why says why). */
int vmm_probe(const vmm_config_t *cfg, int *ret_accel, char *ret_why);

/* The kernel to boot: cfg->kernel or the newest /boot/vmlinuz-*, with its
 * release (the name's suffix; /lib/modules/<release> must exist). Returns 0,
 * or SBX_ENOTFOUND with ret_why. */
int vmm_kernel_find(const vmm_config_t *cfg, char *ret_path, size_t path_cap, char *ret_release,
                    size_t release_cap, char *ret_why);

/* The kernel as QEMU boots it fastest: the uncompressed ELF inside the
 * bzImage (PVH entry; under TCG this halves the boot, ~4 s instead of ~10 s),
 * unpacked at first use into <state>/cache/vmlinux-<release>. Returns 0 with
 * the path, or a negative code (the caller boots the bzImage then). */
int vmm_kernel_boot_image(const vmm_config_t *cfg, const char *kernel, const char *release, char *ret_path,
                          size_t path_cap, char *ret_why);

/* The initramfs for that kernel, built at first use into
 * <state>/cache/initramfs-<release>-<agent hash>.cpio (uncompressed newc:
 * no decompression under TCG): busybox, the modules for virtio-mmio, virtio-blk,
 * virtio-console and ext4 with their dependencies from modules.dep, and the
 * agent as /init. Returns 0 with the path, or a negative code with ret_why. */
int vmm_initramfs_ensure(const vmm_config_t *cfg, char *ret_path, size_t path_cap, char *ret_why);

/* Makes (or finds cached) the ext4 base disk for an image's filesystem:
 * <state>/cache/base-<image_key>-<disk_bytes>.ext4, built with mkfs.ext4 -d
 * from the tar stream read from tar_fd (a `docker export`); tar_fd is not read
 * when the base is cached (pass -1 to ask only: SBX_ENOTFOUND when absent).
 * image_key is the image id ([A-Za-z0-9:_.-], "sha256:" allowed). Returns 0
 * with the path, or a negative code with ret_why. */
int vmm_image_prepare(const vmm_config_t *cfg, const char *image_key, int tar_fd, uint64_t disk_bytes,
                      char *ret_path, size_t path_cap, char *ret_why);

/* The same for one VM alone: the disk made at path (no cache), owned by
 * QEMU's user, mode 0600 (an image of a tenant's snapshot: other VMs never
 * share it, and nothing of it stays once the caller removes path). */
int vmm_image_prepare_private(const vmm_config_t *cfg, int tar_fd, uint64_t disk_bytes, const char *path,
                              char *ret_why);

/* Exports image (a name or id the local Docker knows) through the Engine API
 * on docker_sock (NULL: /var/run/docker.sock): creates a stopped container,
 * streams its filesystem as tar into out_fd, removes the container. Sets
 * ret_image_id (80 bytes) to the image's id. Returns 0 or a negative code. */
int vmm_docker_export(const char *docker_sock, const char *image, int out_fd, char ret_image_id[80],
                      char *ret_why);

/* A data disk (a volume's ext4 image, docs/volumes.md): QEMU gets the open
 * fd (it cannot open the root-owned file itself) as a virtio-blk device
 * with serial "sbxvol<N>" (N its index), the way the guest finds it. */
typedef struct {
    int fd;                  /* open O_RDWR, or O_RDONLY when read_only */
    int read_only;
} vmm_disk_t;

#define VMM_DISKS_MAX 8

/* The Config of image (Env, WorkingDir, User, …) as the local Docker's
 * inspect has it: *ret_config (a new reference), or a negative code. */
struct json_object;
int vmm_docker_image_config(const char *docker_sock, const char *image, struct json_object **ret_config,
                            char *ret_why);

/* A network device (docs/network.md, microvm behind the egress filter):
 * the open tap (its host side addressed and up, owned by the caller, who
 * closes it after vmm_boot: QEMU holds its own copy, and the tap goes with
 * the last of them) and the guest's address, prefix length and gateway, which
 * the guest agent sets on eth0 at boot (its resolver: the gateway). */
typedef struct {
    int fd;
    char guest[16];          /* dotted IPv4 */
    unsigned prefix;         /* 8..30 */
    char gateway[16];        /* dotted IPv4: the tap's host side */
} vmm_nic_t;

/* Makes tap name (a non-persistent one: it goes with its last fd) with
 * host/prefix on it, no IPv6, strict reverse-path filtering, up: 0 with
 * *ret_fd for vmm_nic_t, else a negative code with ret_why (SBX_ECONFLICT:
 * the name is in use). Needs CAP_NET_ADMIN. */
int vmm_tap_open(const char *name, const char *host, unsigned prefix, int *ret_fd, char *ret_why);
/* Whether name is one vmm_tap_open takes: [a-z0-9], 1..15 bytes. */
int vmm_tap_name_ok(const char *name);

/* A VM to boot. */
typedef struct {
    const char *id;          /* VMM_ID_MAX rules */
    const char *base_disk;   /* from vmm_image_prepare */
    uint64_t disk_bytes;     /* the overlay's virtual size (the disk quota) */
    unsigned vcpus;          /* 1..64 */
    unsigned memory_mb;      /* 64..65536 */
    unsigned pids_max;       /* the QEMU process's cgroup pids.max; 0: 256 */
    long boot_timeout_ms;    /* 0: SBX_VMM_BOOT_TIMEOUT_MS */
    const char *template_dir;/* NULL: cold boot; else restore from vmm_template_ensure's
                                template (same base disk, vcpus, memory and disk size) */
    const char *backing;     /* NULL: the overlay is backed by base_disk (raw); else by this
                                qcow2 (a snapshot's disk, vmm_disk_save), on a cold boot */
    const vmm_disk_t *disks; /* data disks (at most VMM_DISKS_MAX; a cold boot only: a
                                restored machine cannot gain devices) */
    unsigned ndisks;
    const vmm_nic_t *nic;    /* NULL: no network device; else a cold boot only (as disks) */
} vmm_spec_t;

typedef struct vmm vmm_t;

/* Fast start: a booted template per (kernel, base disk, vcpus, memory, disk
 * size, accel) in <state>/cache/tpl-<hash>/: a VM booted once to its agent's
 * HELLO, then stopped and saved with QEMU's migration (state.mig) beside its
 * frozen disk (disk.qcow2, backed by the base). A VM booted with
 * spec->template_dir set to it restores that state (-incoming) over its own
 * overlay of disk.qcow2 instead of booting. Made at first use (one cold boot);
 * returns 0 with the directory, or a negative code with ret_why. All VMs
 * restored from one template start from the same RAM, the guest kernel's
 * random pool included (see docs). */
int vmm_template_ensure(const vmm_config_t *cfg, const vmm_spec_t *spec, char *ret_dir, size_t dir_cap,
                        char *ret_why);

/* Boots a VM: <state>/vms/<id>/ with overlay.qcow2 (backed by base_disk),
 * agent.sock, console.log, qemu.pid and meta.json; QEMU runs as cfg->run_as
 * in its own session, in a cgroup with cpu/memory/pids limits when the host
 * has them (v2, or v1 controllers; without them it runs unconfined and
 * *ret_vm's cgroup note says so), with no network device but spec->nic. Returns when
 * the agent answered HELLO; 0 with *ret_vm, else a negative code with ret_why
 * and nothing left behind. SBX_ECONFLICT when the id exists. <state> is made
 * searchable by others (o+x) so QEMU's user reaches its own VM directory. */
int vmm_boot(const vmm_config_t *cfg, const vmm_spec_t *spec, vmm_t **ret_vm, char *ret_why);

/* Connects to a running VM by id (a restarted driver). 0 with *ret_vm, or
 * SBX_ENOTFOUND / SBX_EIO with ret_why. */
int vmm_attach(const vmm_config_t *cfg, const char *id, long timeout_ms, vmm_t **ret_vm, char *ret_why);

/* Closes the connection; the VM runs on. NULL is fine. */
void vmm_detach(vmm_t *vm);

/* The guest's kernel release (from its HELLO); valid while vm is. */
const char *vmm_guest_release(const vmm_t *vm);
/* How the QEMU process is confined: "cgroup v2 ...", "cgroup v1 ...", or "none: ...". */
const char *vmm_cgroup_note(const vmm_t *vm);
/* The QEMU process id. */
pid_t vmm_pid(const vmm_t *vm);

/* Streamed output of an exec: stream 1 stdout, 2 stderr. */
typedef void (*vmm_output_fn)(void *arg, int stream, const void *p, size_t n);

typedef struct {
    vmm_cmd_t cmd;           /* argv, env, cwd (rows/cols unused) */
    const void *stdin_data;  /* sent then closed; or */
    size_t stdin_len;
    int stdin_fd;            /* -1: none; else read to EOF and sent (after stdin_data) */
    size_t max_output;       /* bytes per stream passed to on_output; beyond: truncated (0: SBX_EXEC_OUTPUT_DEFAULT) */
    long timeout_ms;         /* 0: none; at the deadline the whole tree is killed */
    vmm_output_fn on_output;
    void *arg;
} vmm_exec_req_t;

typedef struct {
    int how;                 /* VMM_EXIT_CODE / VMM_EXIT_SIGNAL */
    int code;                /* exit code or signal number */
    int timed_out;           /* the deadline killed it */
    int truncated[3];        /* [1] stdout, [2] stderr went over max_output */
    uint64_t bytes[3];       /* bytes each stream produced in all */
} vmm_exec_result_t;

/* Runs a command in the guest to its end. Returns 0 with *ret (also when the
 * command failed or timed out), SBX_ENOTFOUND when argv[0] cannot be executed
 * (ret_why has the guest's errno text), SBX_EIO when the channel broke. */
int vmm_exec(vmm_t *vm, const vmm_exec_req_t *req, vmm_exec_result_t *ret, char *ret_why);

/* Unpacks the tar stream read from tar_fd into dir inside the guest (busybox
 * tar in the guest's /.sbx). Returns 0, or SBX_ERUNTIME with tar's stderr in ret_why. */
int vmm_files_put(vmm_t *vm, const char *dir, int tar_fd, long timeout_ms, char *ret_why);

/* Writes a tar stream of path (a file or a directory) inside the guest to out_fd. */
int vmm_files_get(vmm_t *vm, const char *path, int out_fd, long timeout_ms, char *ret_why);

/* A live session: a PTY shell or a dial. */
typedef struct vmm_session vmm_session_t;

/* Starts cmd on a new PTY of rows x cols. 0 with *ret_s, or as vmm_exec. */
int vmm_shell_open(vmm_t *vm, const vmm_cmd_t *cmd, vmm_session_t **ret_s, char *ret_why);

/* Connects to 127.0.0.1:port inside the guest. 0 with *ret_s; SBX_EUNAVAIL
 * when nothing listens there (ret_why says so). */
int vmm_dial(vmm_t *vm, unsigned port, vmm_session_t **ret_s, char *ret_why);

/* Sends bytes to the session (n 0: end of input). 0 or SBX_EIO. */
int vmm_session_write(vmm_session_t *s, const void *p, size_t n);

/* Sets a PTY's size. */
int vmm_session_resize(vmm_session_t *s, unsigned rows, unsigned cols);

/* Reads what the session sent, waiting up to timeout_ms: returns the byte
 * count (> 0), 0 when it ended (*ret_exit_code then holds its exit code, or
 * 128 + signal), SBX_ETIMEOUT when nothing came, SBX_EIO when the channel broke. */
long vmm_session_read(vmm_session_t *s, void *buf, size_t cap, long timeout_ms, int *ret_exit_code);

/* Starts cmd without a PTY as a session (the caller streams stdin with
 * vmm_session_write and reads stdout/stderr with vmm_session_read_stream):
 * for callers that interleave several sessions of one VM. 0 or as vmm_exec. */
int vmm_exec_open(vmm_t *vm, const vmm_cmd_t *cmd, vmm_session_t **ret_s, char *ret_why);

/* As vmm_session_read, and *ret_stream (may be NULL) says whose bytes they
 * are: 1 stdout, 2 stderr. */
long vmm_session_read_stream(vmm_session_t *s, void *buf, size_t cap, long timeout_ms, int *ret_stream,
                             int *ret_exit_code);

/* Sends signal sig to the session's whole process tree in the guest. 0 or SBX_EIO. */
int vmm_session_kill(vmm_session_t *s, int sig);

/* Ends the session (kills what still runs in it) and frees it. NULL is fine. */
void vmm_session_close(vmm_session_t *s);

/* One VM found under <state>/vms/. */
typedef struct {
    char id[VMM_ID_MAX];
    pid_t pid;               /* 0 when QEMU is not running */
    int running;             /* pid is alive and is our QEMU for this VM */
} vmm_info_t;

/* Lists the VMs in <state>/vms/ (also those a previous driver started).
 * *ret is malloc'd (free it), *ret_n its length. */
int vmm_list(const vmm_config_t *cfg, vmm_info_t **ret, size_t *ret_n);

/* Keeps every VM's console.log (what the guest writes to its serial port,
 * unthrottled: a hostile guest writes hundreds of KB a second) under
 * SBX_VMM_CONSOLE_MAX: one past it is cut to its last SBX_VMM_CONSOLE_KEEP
 * bytes behind a line saying so. A driver calls it every few seconds; the
 * files are QEMU's and are treated as hostile (no symlink followed).
 * Returns how many were cut. */
int vmm_console_trim(const vmm_config_t *cfg);

/* Kills the VM's QEMU (after checking the pid is our QEMU for this VM's
 * directory), removes its cgroup and its directory. 0 also when it was
 * already gone; SBX_EINVAL for a bad id. */
int vmm_destroy(const vmm_config_t *cfg, const char *id, char *ret_why);

/* Saves VM id's root disk as it is now (the overlay read through its
 * backing chain) into out_path, a standalone qcow2 a later VM can be backed
 * by (vmm_spec_t.backing). The caller makes it consistent (the guest's
 * sync, the VM frozen). *ret_bytes: the file's size. 0, or a negative code
 * with ret_why. */
int vmm_disk_save(const vmm_config_t *cfg, const char *id, const char *out_path, long long *ret_bytes,
                  char *ret_why);

/* Saves running VM id whole into out_dir, a directory of the caller's that
 * vmm_boot can restore from as from a template (spec.template_dir): its
 * memory and devices through QEMU's migration (state.mig; the stream ends
 * with the guest stopped and its disk let go), then its root disk as that
 * memory saw it (disk.qcow2, standalone as vmm_disk_save's), its command
 * line (append) and the machine they need (machine.json); then the VM goes
 * on. The host's connection to the agent should be idle meanwhile. A VM
 * with data disks is SBX_EINVAL; one booted before VMs had a QMP socket,
 * SBX_EUNAVAIL. *ret_bytes: the disk file's size. */
int vmm_state_save(const vmm_config_t *cfg, const char *id, const char *out_dir, long long *ret_bytes,
                   char *ret_why);

/* Lets VM id's guest run again if QEMU stopped it (QMP cont: a state save
 * cut short); a running guest stays as it is. 0 or a negative code. */
int vmm_guest_continue(const vmm_config_t *cfg, const char *id, char *ret_why);

/* 1 when a VM of spec can restore the state vmm_state_save put in dir: the
 * same vCPUs, memory and disk size, no data disks, the same accelerator,
 * guest kernel and agent; else 0 with the reason in ret_why. */
int vmm_state_fits(const vmm_config_t *cfg, const char *dir, const vmm_spec_t *spec, char *ret_why);

/* Checks a qcow2 header (its first n bytes, at least 104 for version 3):
 * a standalone image (no backing file, no external data file, not
 * encrypted, no feature QEMU would not know). 0 with *ret_size its virtual
 * size, or SBX_EINVAL with ret_why. Pure: for bytes of another's making. */
int vmm_qcow2_standalone(const unsigned char *h, size_t n, uint64_t *ret_size, char *ret_why);

/* Takes snapshot directory dir, whose files came from elsewhere (another
 * worker's copy, docs/snapshots.md "Copies"), as this host's: disk.qcow2 a
 * standalone qcow2 of disk_bytes, given to QEMU's user (0600); with memory,
 * machine.json, append and state.mig as vmm_state_save writes them. 0, or
 * SBX_EINVAL (SBX_EIO) with ret_why; nothing of it has been opened by QEMU
 * or qemu-img. */
int vmm_snapshot_adopt(const vmm_config_t *cfg, const char *dir, uint64_t disk_bytes, int memory, char *ret_why);

/* 1 when VM id's QEMU is frozen (vmm_freeze), 0 when not, < 0 when it is
 * not running. */
int vmm_frozen(const vmm_config_t *cfg, const char *id);

/* Freezes (SIGSTOP) or thaws (SIGCONT) the VM's QEMU, after checking the
 * pid is our QEMU for this VM: a paused VM keeps its memory and its
 * processes and uses no CPU. 0; SBX_ENOTFOUND when its QEMU is not
 * running; SBX_EINVAL for a bad id. */
int vmm_freeze(const vmm_config_t *cfg, const char *id, bool frozen, char *ret_why);

#endif
