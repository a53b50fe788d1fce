/* The bodies of the Docker Engine requests that create containers: the
 * hardening every sandbox gets, per isolation class and network plan. Pure
 * JSON building, no I/O, so the profile can be unit-tested. */
#ifndef SBX_DOCKER_CONFIG_H
#define SBX_DOCKER_CONFIG_H

#include <json-c/json.h>

#include "runtime.h"
#include "spec.h"

/* Processes a sandbox may hold: a fork bomb stops here. */
#define DOCKER_PIDS_LIMIT        1024
/* The /tmp tmpfs of a read-only sandbox: at most this, and at most a
 * quarter of its memory (tmpfs pages count against the memory limit). */
#define DOCKER_TMPFS_MAX_MIB     64
/* Docker's own default size of /dev/shm (a tmpfs), kept unless the disk
 * quota is smaller. */
#define DOCKER_SHM_MIB           64
/* The probe container: small memory, but the sandboxes' own pids limit, so
 * the probe shows that runsc starts under it (the host threads of runsc's
 * kernel count against it: 16 is too few). */
#define DOCKER_PROBE_MEMORY_MIB  64
#define DOCKER_PROBE_PIDS_LIMIT  DOCKER_PIDS_LIMIT

/* What the runtime decided for one create, beyond the spec. */
typedef struct docker_create_plan {
    const char *runtime;       /* HostConfig.Runtime; NULL: dockerd's default (runc) */
    const char *network_mode;  /* HostConfig.NetworkMode: "none" or a network name */
    bool storage_quota;        /* the storage driver takes HostConfig.StorageOpt size (the disk quota) */
    const char *image;         /* the image to run: the spec's, or its snapshot's (NULL: the spec's) */
    struct json_object *mounts; /* HostConfig.Mounts: its volumes (borrowed; NULL: none) */
    const char *filter_dns;    /* on the filtered network: its resolver (the bridge's gateway); NULL: not */
} docker_create_plan_t;

/* The capabilities a sandbox keeps after CapDrop ALL (NULL-terminated),
 * unless its spec is hardened (then none). */
extern const char *const docker_sandbox_caps[];

/* ["a", "b", ...] from a NULL-terminated list. New reference. */
json_object *docker_json_strings(const char *const *items);
/* Env as Docker's ["K=V", ...]. New reference. */
json_object *docker_json_env(const kv_list_t *env);

/* The size in MiB of the /tmp tmpfs of a read-only sandbox of memory_mib. */
int64_t docker_tmpfs_mib(int64_t memory_mib);

/* The size in MiB of a tmpfs (/tmp of a read-only root, /dev/shm) of
 * sandbox s: within its memory (docker_tmpfs_mib for /tmp, default_mib for
 * /dev/shm) and within its disk quota when it has one, so no tmpfs holds
 * more than disk_mib. */
int64_t docker_tmpfs_quota_mib(const sandbox_spec_t *s, int64_t default_mib);

/* The POST /containers/create body of a sandbox (new reference): labels
 * (RUNTIME_LABEL_DISK_MIB with the disk quota), limits (the quota also as
 * StorageOpt size when plan->storage_quota, and as the bound of every tmpfs), CapDrop ALL plus docker_sandbox_caps (none when hardened),
 * no-new-privileges, Docker's default seccomp profile, docker-init as pid 1,
 * no mounts or ports, a read-only root with a bounded /tmp tmpfs when asked,
 * and plan's runtime and network. */
json_object *docker_sandbox_body(const runtime_create_req_t *req, const docker_create_plan_t *plan);

/* The body of the gVisor probe container: image, runtime, `docker-init
 * --version` under Init, no network, the sandbox hardening, labelled
 * RUNTIME_LABEL_MANAGED=RUNTIME_MANAGED_PROBE (and RUNTIME_LABEL_WORKER
 * with worker_name when given) and never with the cluster label, so no
 * inventory takes it for a sandbox. New reference. */
json_object *docker_probe_body(const char *image, const char *runtime, const char *worker_name);

#endif
