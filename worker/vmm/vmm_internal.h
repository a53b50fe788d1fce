/* worker/vmm's private helpers shared by its files (not for callers). */
#ifndef SBX_VMM_INTERNAL_H
#define SBX_VMM_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm.h"

/* Formats a reason into why (VMM_WHY_MAX; why may be NULL). */
void vmm__why(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs argv (argv[0] searched in PATH) to its end with stdin from in_fd (-1:
 * /dev/null) and stdout to out_fd (-1: captured with stderr). Returns 0 when
 * it exited 0; else SBX_ERUNTIME with "argv[0]: <last output line or status>"
 * in why. timeout_ms 0: none (else it is killed and SBX_ETIMEOUT). */
int vmm__run(const char *const *argv, int in_fd, int out_fd, long timeout_ms, char *why);

/* Removes path and all under it (no symlinks followed). 0, or -1 with errno. */
int vmm__rm_tree(const char *path);

/* snprintf that reports truncation: 0, or SBX_ETOOBIG. */
int vmm__path(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Writes data to path through a temporary file and rename (mode). 0 or -errno-like SBX_EIO. */
int vmm__write_file(const char *path, const void *data, size_t n, mode_t mode);

/* Reads at most cap-1 bytes of path into buf, NUL-terminated. Returns the length or -1. */
long vmm__read_file(const char *path, char *buf, size_t cap);

/* The unprivileged user QEMU runs as (vmm_config_t.run_as). 0 or SBX_E*. */
int vmm__run_as(const vmm_config_t *cfg, uid_t *uid, gid_t *gid, char *why);

/* The directories: <state>/cache and <state>/vms/<id> (id checked). */
int vmm__cache_dir(const vmm_config_t *cfg, char *out, size_t cap);
int vmm__vm_dir(const vmm_config_t *cfg, const char *id, char *out, size_t cap);

/* 1 when id is a valid VM id. */
int vmm__id_ok(const char *id);

/* FNV-1a over n bytes, continuing from h (start: VMM_FNV_START): cache keys. */
#define VMM_FNV_START 1469598103934665603ull
uint64_t vmm__fnv1a(uint64_t h, const void *p, size_t n);

/* Milliseconds on the monotonic clock. */
long long vmm__now_ms(void);

#endif

/* ---- the connection to a guest agent (vmm_agent.c) ---- */

struct vmm_session {
    vmm_t *vm;
    uint32_t ch;
    uint8_t kind;
    uint8_t *in[3];          /* bytes received per stream ([1] OUT, [2] ERR), not yet taken */
    size_t nin[3], capin[3];
    int opened;              /* OPENED came */
    int ended;               /* EXIT or ERROR came */
    int how, code;           /* EXIT's */
    int err;                 /* ERROR's errno (0: none) */
    char errmsg[VMM_WHY_MAX];
    struct vmm_session *next;
};

struct vmm {
    int fd;                  /* the agent socket (nonblocking) */
    char id[VMM_ID_MAX];
    char dir[VMM_PATH_MAX];
    pid_t pid;
    char release[128];
    char cgnote[VMM_WHY_MAX];
    uint8_t *rbuf;
    size_t rhave;
    unsigned long long rtotal; /* bytes read from the agent, ever */
    uint32_t next_ch;
    int broken;              /* the stream failed: every call fails with SBX_EIO */
    int bad_version;         /* the guest's HELLO named another protocol version: */
    uint32_t peer_version;   /* that one */
    struct vmm_session *sessions;
};

/* Connects vm->fd to <dir>/agent.sock and trades HELLO, retrying until
 * timeout_ms passed (the guest may still be booting). */
int vmm__agent_connect(vmm_t *vm, long timeout_ms, char *why);
/* Reads (and dispatches) what the agent sends until it has been silent for
 * quiet_ms, at most max_ms: nothing of the guest's is in flight after it. */
int vmm__agent_quiesce(vmm_t *vm, long quiet_ms, long max_ms);

/* What a template's boot and a restore add to vmm_boot. */
typedef struct {
    const char *backing;      /* the overlay's backing file (qcow2) instead of the base disk */
    const char *incoming;     /* a migration stream to restore from */
    const char *append;       /* the kernel command line (a template's) */
    char *ret_append;         /* 256 bytes: the command line used */
} vmm_boot_extra_t;

int vmm__boot(const vmm_config_t *cfg, const vmm_spec_t *spec, const vmm_boot_extra_t *x, vmm_t **ret_vm,
              char *ret_why);

/* Frees vm (closes its socket and sessions); the VM runs on. */
void vmm__free(vmm_t *vm);
