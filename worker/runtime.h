/* The runtime interface a worker drives: the backends named by the
 * worker_runtime setting (Docker, worker/docker/; an external driver,
 * worker/external/; several at once through worker/runtime_multi.c). A backend is a table of operations (runtime_ops_t) and a
 * struct that embeds runtime_t first; the runtime_* functions below dispatch
 * through the table (worker/runtime.c). Calls are blocking and thread-safe:
 * the worker runs them on its executor threads. */
#ifndef SBX_RUNTIME_H
#define SBX_RUNTIME_H

#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "errors.h"
#include "limits.h"
#include "sbuf.h"
#include "spec.h"

typedef struct runtime runtime_t;

/* A sandbox's disk quota in MiB (its spec's disk_mib), on the object so
 * the quota survives a worker restart. */
#define RUNTIME_LABEL_DISK_MIB "dev.sandbox.disk_mib"
/* Labels every runtime object of ours carries. */
#define RUNTIME_LABEL_MANAGED  "dev.sandbox.managed"
#define RUNTIME_LABEL_SANDBOX  "dev.sandbox.id"
#define RUNTIME_LABEL_TENANT   "dev.sandbox.tenant"
/* The CIDRs an open sandbox may reach past the egress block (its
 * assignment's egress_allow, joined by ","): the worker's record, from
 * which it restores the allow rules when it starts. */
#define RUNTIME_LABEL_EGRESS_ALLOW "dev.sandbox.egress_allow"
/* a filtered sandbox's egress rules (canonical JSON), the worker's record */
#define RUNTIME_LABEL_EGRESS "dev.sandbox.egress"
/* The installation (controller database) the object belongs to. */
#define RUNTIME_LABEL_CLUSTER  "dev.sandbox.cluster"
/* The worker (by name) that made the object: several workers may share one
 * Docker host, and each reports and cleans only its own objects. */
#define RUNTIME_LABEL_WORKER   "dev.sandbox.worker"
/* RUNTIME_LABEL_MANAGED values: a sandbox ("true"; the only value the
 * inventory lists), the gVisor probe container, the worker's networks. */
#define RUNTIME_MANAGED_SANDBOX "true"
#define RUNTIME_MANAGED_PROBE   "probe"
#define RUNTIME_MANAGED_NETWORK "network"
/* A snapshot (a local image of the Docker backend): RUNTIME_LABEL_MANAGED
 * says so, RUNTIME_LABEL_SNAPSHOT names it, RUNTIME_LABEL_TENANT,
 * _CLUSTER and _WORKER say whose it is. */
#define RUNTIME_MANAGED_SNAPSHOT "snapshot"
#define RUNTIME_LABEL_SNAPSHOT "dev.sandbox.snapshot"
/* The most snapshots one inventory lists. */
#define RUNTIME_MAX_SNAPSHOTS   1024

/* Local image names a worker advertises: at most this many, each at most
 * this long (longer ones are left out). */
#define RUNTIME_MAX_IMAGES      512
#define RUNTIME_MAX_IMAGE_NAME  255
/* A class's probe result, for the log and the registration. */
#define RUNTIME_PROBE_TEXT_MAX  400

typedef struct runtime_create_req {
    const char *sandbox_id;
    const char *tenant;
    const sandbox_spec_t *spec;
    isolation_t isolation;
    const char *cluster_id;   /* labels the object; may be NULL */
    const char *worker_name;  /* labels the object; may be NULL */
    const char *egress_allow; /* the tenant's egress_allow: canonical CIDRs joined by ","
                               * (network open only); NULL or "" = none */
    /* The spec's secrets, opened by the controller for this create only
     * ([{"name","header","hosts","value"}], borrowed; NULL: none): the
     * egress filter adds them (docs/network.md#secrets-at-egress). */
    json_object *secrets;
    /* The spec's volumes as disk images another backend of this worker
     * claimed for the sandbox (runtime_volume_disks), one per spec volume
     * in order: for a backend that mounts no files of the host (microvm). */
    const struct runtime_disk *disks;
    size_t ndisks;
    /* The spec's image is the image of a snapshot another backend of this
     * worker holds (runtime_snapshot_image), put there by the worker, never
     * a client's: the one case a create may name the snapshot repository. */
    bool image_of_snapshot;
    /* NULL, or set to true when the sandbox resumed the memory of the
     * snapshot it is made from (spec->from; microvm), false when it booted */
    bool *ret_memory;
    /* A NIC another backend of this worker filters (runtime_nic_attach),
     * for a backend that takes one (microvm, network open); NULL none. */
    const struct runtime_nic *nic;
} runtime_create_req_t;

typedef struct runtime_exec_result {
    int exit_code;        /* the process's exit code; 128+signal when killed */
    int signal;           /* signal that ended it, 0 when it exited */
    bool timed_out;       /* killed because timeout_seconds passed */
    bool cancelled;       /* killed because a client cancelled it (sink's cancelled) */
    int64_t duration_ms;
    sbuf_t out;           /* bounded stdout: out.truncated, out.seen = bytes produced */
    sbuf_t err;           /* bounded stderr */
    char warning[300];    /* "" or what the timeout kill could not do, for the worker's log */
} runtime_exec_result_t;

/* Where a running exec's output goes as it is produced (live output), apart
 * from the bounded result: write gets every byte of stdout (stream 1) and
 * stderr (stream 2) in order, tick is called about every 100 ms while the
 * command runs. Both run on the exec's thread and may block briefly
 * (they send the output on); neither may call back into the runtime. */
typedef struct runtime_output_sink {
    void (*write)(void *ud, int stream, const char *p, size_t n);
    void (*tick)(void *ud);
    /* NULL, or true once a client cancelled the exec: the command's
     * process tree is killed as on a timeout (result.cancelled). */
    bool (*cancelled)(void *ud);
    void *ud;
} runtime_output_sink_t;

/* How a container that is not running ended, as the runtime saw it. */
typedef struct runtime_exit {
    bool known;           /* the fields below were observed (inspected) */
    char state[32];       /* the runtime's state then ("exited", "created", ...) */
    int exit_code;        /* the main process's exit code; -1 unknown */
    bool oom_killed;      /* the kernel's OOM killer ended a process of it */
    bool disk_quota_exceeded; /* its writable layer is over its disk quota (the worker stopped it) */
    char finished_at[40]; /* RFC 3339 as the runtime says, "" unknown */
    char error[SBX_OBSERVED_ERROR_MAX]; /* the runtime's own error (could not start), "" */
    char *output_tail;    /* malloc'd: the last <= SBX_OUTPUT_TAIL_MAX bytes of the main
                           * process's stdout+stderr, UTF-8 repaired; NULL none */
} runtime_exit_t;

/* Frees what e holds (not e); NULL is fine. */
void runtime_exit_release(runtime_exit_t *e);

typedef struct runtime_object {
    char sandbox_id[SBX_ID_MAX];
    char tenant[64];
    char ref[80];         /* runtime's own id (container id) */
    char state[32];       /* "running", "exited", ... as the runtime says */
    runtime_exit_t exit;  /* for a stopped container ("exited", "dead"), when fetched */
} runtime_object_t;

/* The backends runtime_open knows, by the worker_runtime setting (a
 * comma-separated list of them; several make one composite runtime,
 * worker/runtime_multi.c). */
#define RUNTIME_BACKEND_DOCKER   "docker"
#define RUNTIME_BACKEND_EXTERNAL "external"

/* Opens the backend cfg's worker_runtime names, with that backend's own
 * settings from cfg (Docker: docker_socket, worker_gvisor_runtime,
 * worker_restricted_network, worker_open_network) and worker_name
 * labelling what it makes (may be NULL). Finds out what the runtime really
 * offers (see the backend's open function: it may block for a probe).
 * Returns 0 with *ret set (runtime_free), SBX_EINVAL for an unknown backend
 * or a malformed setting, SBX_EUNAVAIL when the runtime does not answer,
 * with err filled. */
int runtime_open(const cfg_t *cfg, const char *worker_name, runtime_t **ret, api_error_t *err);

/* Asks the runtime whether it answers, within timeout_ms. Returns 0, or
 * SBX_EUNAVAIL / SBX_ETIMEOUT / SBX_ERUNTIME with err saying what failed
 * (naming where the runtime was sought). */
int runtime_ping(runtime_t *rt, long timeout_ms, api_error_t *err);

/* Name (the backend's: "docker") and the isolation classes this runtime really offers. */
const char *runtime_name(const runtime_t *rt);
/* Writes the classes into ret (at most max) and returns how many. */
size_t runtime_isolation_classes(const runtime_t *rt, isolation_t *ret, size_t max);

/* The network modes class cls supports, as a bitmask of 1u << net_mode_t;
 * 0 when the class is not offered. */
unsigned runtime_network_modes(const runtime_t *rt, isolation_t cls);

/* A human-readable line on whether class cls is offered and why ("ok: ...",
 * "not offered: ..."), or NULL when the runtime did not consider the class
 * (the container class is not probed; microvm is not considered). */
const char *runtime_probe_result(const runtime_t *rt, isolation_t cls);

/* Why mode is not available under class cls ("" when it is). */
const char *runtime_network_unavailable(const runtime_t *rt, isolation_t cls, net_mode_t mode);

/* The repo:tag names of the local images (without "<none>:<none>"): at most
 * RUNTIME_MAX_IMAGES names of at most RUNTIME_MAX_IMAGE_NAME bytes, a
 * malloc'd array of malloc'd strings (runtime_images_free). */
int runtime_images(runtime_t *rt, char ***ret, size_t *ret_n, api_error_t *err);
void runtime_images_free(char **names, size_t n);
/* What the runtime knows of its local images, for GET /v1/images: a JSON
 * object {"repo:tag":{"size":BYTES,"created":UNIX_SECONDS}} of the names
 * runtime_images gives (the caller owns it). SBX_EUNAVAIL when the runtime
 * keeps no such details (the heartbeat then leaves them out). */
int runtime_image_details(runtime_t *rt, struct json_object **ret, api_error_t *err);

/* Creates and starts the sandbox; pulls the image when missing (a failed
 * pull: API_IMAGE_UNAVAILABLE with the runtime's message). A class the
 * runtime does not offer, or a network mode the class cannot provide, is
 * API_ISOLATION_UNAVAILABLE naming both: never a weaker substitute.
 * Succeeds only once the runtime confirms the main process running after
 * the start (no fixed wait: until it has exec'd, bounded to a few
 * seconds); a container that is not running, or that the runtime could not
 * start, is API_SANDBOX_EXITED naming the reason, the exit code and the
 * last output, with *ret_exit (when not NULL; release it with
 * runtime_exit_release, also after success) filled, and the container is
 * removed. Idempotent: when an object for this sandbox already exists and
 * runs, returns it. ret_ref gets the runtime's id. */
int runtime_create(runtime_t *rt, const runtime_create_req_t *req, char ret_ref[80], runtime_exit_t *ret_exit,
                   api_error_t *err);

/* Runs argv in the sandbox with the spec's env/cwd/timeout, keeping at most
 * max_output bytes per stream. *ret is initialised by the call; release it
 * with runtime_exec_result_release. A command that cannot start (no such
 * file) is a result with exit code 126/127 as a shell would give, not an
 * error; errors are for a missing sandbox or a failing runtime. On a
 * timeout the command's process tree is killed (under gVisor, inside the
 * sandbox through runsc when it can be identified; ret->warning says when
 * something could not be killed). sink (NULL: none) sees the output as it
 * comes. */
int runtime_exec(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                 const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err);
void runtime_exec_result_release(runtime_exec_result_t *r);

/* Whose a runtime object must be: the sandbox, the installation and the
 * worker (cluster_id NULL or "": not registered yet, not checked). */
typedef struct runtime_owner {
    const char *sandbox_id;
    const char *cluster_id;
    const char *worker_name;
} runtime_owner_t;

/* Checks the runtime object ref (NULL or "": the one named for the
 * sandbox) before the worker execs in it, removes it or routes to it: the
 * controller's word is not enough. It must carry RUNTIME_LABEL_MANAGED =
 * RUNTIME_MANAGED_SANDBOX, RUNTIME_LABEL_SANDBOX = who->sandbox_id,
 * RUNTIME_LABEL_CLUSTER = who->cluster_id (when given) and
 * RUNTIME_LABEL_WORKER = who->worker_name. Returns 0 with ret_ref its id;
 * SBX_ENOTFOUND (err API_NOT_FOUND) when there is no such object; SBX_EPERM
 * (err API_NOT_FOUND naming the label that differs) when it is another's;
 * a failing runtime API_RUNTIME_ERROR. */
int runtime_check_owner(runtime_t *rt, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                        api_error_t *err);

/* Removes the sandbox's objects (force). Removing what is already gone
 * succeeds. ref may be NULL: then the object is found by its sandbox label. */
int runtime_remove(runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err);

/* Every object of the installation cluster_id (RUNTIME_LABEL_CLUSTER), or
 * every object carrying RUNTIME_LABEL_MANAGED when cluster_id is NULL,
 * leaving out those another worker made (RUNTIME_LABEL_WORKER set and not
 * worker_name; objects without the label, from before it existed, are
 * kept): a malloc'd array (runtime_inventory_free). worker_name may be
 * NULL (no filter). For at most SBX_INVENTORY_DETAILS_MAX stopped objects
 * per call (taken in turn, so the others come with later calls), `exit`
 * holds how they ended; a failure to fetch those details only leaves them
 * out. */
int runtime_inventory(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                      size_t *ret_n, api_error_t *err);

void runtime_inventory_free(runtime_object_t *objs, size_t n);

typedef struct runtime_dial_req {
    const char *sandbox_id;
    const char *worker_name;
    int port;                 /* in the sandbox, 1..65535 */
    int64_t timeout_ms;       /* for the connect itself */
    int stop_fd;              /* readable: give up (API_CANCELLED); -1 none */
} runtime_dial_req_t;

/* Where a route of a sandbox leads: a TCP connection to req->port on the
 * sandbox's own loopback, connected, nonblocking and close-on-exec, in
 * *ret_fd (the caller closes it). The sandbox must carry
 * RUNTIME_LABEL_SANDBOX = sandbox_id and RUNTIME_LABEL_WORKER = worker_name
 * and be running, else API_NOT_FOUND; a sandbox whose network the backend
 * cannot reach (a gVisor sandbox: its network stack is inside the sandbox)
 * is API_ISOLATION_UNAVAILABLE; a network the worker cannot enter (not
 * root), nothing accepting on the port, or a failed connect is
 * API_UNAVAILABLE with a message for the caller; req->stop_fd readable
 * first is API_CANCELLED; a failing runtime is API_RUNTIME_ERROR. Finding
 * the sandbox is bounded to about 10 s, the connect to req->timeout_ms. */
int runtime_dial(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err);

/* The container of sandbox_id, for reading its logs: it must carry
 * RUNTIME_LABEL_SANDBOX = sandbox_id and RUNTIME_LABEL_WORKER = worker_name
 * (else API_NOT_FOUND, as a missing one); running or not, any class
 * (logs need no network namespace, so gVisor sandboxes have them too).
 * ret_ref gets its id. Bounded to about 10 s. */
int runtime_logs_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                        api_error_t *err);

/* Receives output in order as it arrives: stream 1 (stdout) or 2 (stderr),
 * n > 0 bytes. Returning < 0 ends the stream (runtime_logs_stream then
 * returns 0). */
typedef int (*runtime_logs_fn)(void *ud, int stream, const char *data, size_t n);

typedef struct runtime_logs_req {
    int64_t tail;             /* lines from the end; < 0: all */
    bool follow;              /* then keep streaming until the container stops */
    const int *stop_fds;      /* the stream ends (returns 0) once one is readable or hung up */
    size_t nstop_fds;
    runtime_logs_fn on_output;
    void *ud;
} runtime_logs_req_t;

/* Streams the main process's stdout and stderr of container ref to
 * req->on_output until the runtime ends it (everything read; with follow,
 * the container stopped or was removed), on_output asks to stop, or a stop
 * descriptor is readable: 0 in all those cases. A container that is gone is API_NOT_FOUND; the worker stopping
 * (cancel flag) API_CANCELLED; a failing runtime API_RUNTIME_ERROR. Blocks
 * the calling thread for as long as the stream lasts. */
int runtime_logs_stream(runtime_t *rt, const char *ref, const runtime_logs_req_t *req, api_error_t *err);

/* ---- file transfers (docs/worker.md "File transfers") ----------------- */

typedef enum {
    RUNTIME_FILES_TAR = 0,    /* a tar stream: put unpacks it into path, get is path's archive */
    RUNTIME_FILES_RAW,        /* one regular file's bytes */
    RUNTIME_FILES_LIST,       /* get only: a JSON listing of path's direct children */
} runtime_files_format_t;

/* What runtime_files_read_fn returns when the upload was aborted (the
 * connection ended before its end): the transfer must fail, so nothing
 * half-written is reported as done. */
#define RUNTIME_FILES_ABORTED (-1)
/* ... and when the reader refused the upload itself (a malformed frame):
 * the transfer fails and the reader's own error stands. */
#define RUNTIME_FILES_REFUSED (-2)

/* Pulls the next bytes of an upload into buf (cap > 0): the count (> 0),
 * 0 once the upload is complete (its end was seen), or
 * RUNTIME_FILES_ABORTED / RUNTIME_FILES_REFUSED. Blocks until one of those. */
typedef ptrdiff_t (*runtime_files_read_fn)(void *ud, char *buf, size_t cap);

typedef struct runtime_files_put_req {
    const char *ref;          /* the container (runtime_files_target) */
    const char *path;         /* absolute; TAR: the directory to unpack into; RAW: the file */
    runtime_files_format_t format; /* RUNTIME_FILES_TAR or RUNTIME_FILES_RAW */
    int64_t size;             /* RAW: the exact byte count; else unused */
    unsigned mode;            /* RAW: permission bits (0..07777) */
    bool parents;             /* RAW: make the missing directories above the file (0755), as mkdir -p,
                               * without any tool in the image; a backend that cannot: the 404 of a
                               * missing directory */
    int64_t max_bytes;        /* the most upload bytes accepted (RAW: size counts), > 0 */
    runtime_files_read_fn read;
    void *ud;
    const int *stop_fds;      /* the transfer fails (API_CANCELLED) once one is readable */
    size_t nstop_fds;
} runtime_files_put_req_t;

/* What a get is about (the Engine's stat of the path, not following a
 * final symlink). */
typedef struct runtime_files_stat {
    char name[256];           /* the path's last component */
    int64_t size;
    unsigned mode;            /* permission bits (07777) */
    const char *type;         /* "file", "dir", "symlink" or "other" (static) */
    char mtime[48];           /* RFC 3339 */
    char link_target[SBX_FILES_PATH_MAX];  /* a symlink's target, else "" */
} runtime_files_stat_t;

/* Called once, before any body byte, with the path's stat: returning < 0
 * ends the transfer (the call then returns 0). */
typedef int (*runtime_files_stat_fn)(void *ud, const runtime_files_stat_t *st);
/* Receives the body in order, n > 0 bytes; < 0 ends the transfer (the
 * call returns 0). */
typedef int (*runtime_files_write_fn)(void *ud, const char *data, size_t n);

typedef struct runtime_files_get_req {
    const char *ref;
    const char *path;         /* absolute */
    runtime_files_format_t format;
    runtime_files_stat_fn on_stat;
    runtime_files_write_fn on_data;
    void *ud;
    const int *stop_fds;      /* the transfer ends (returns 0) once one is readable or hung up */
    size_t nstop_fds;
} runtime_files_get_req_t;

/* The container of sandbox_id to move files into or out of: it must carry
 * RUNTIME_LABEL_MANAGED = RUNTIME_MANAGED_SANDBOX, RUNTIME_LABEL_SANDBOX =
 * sandbox_id and RUNTIME_LABEL_WORKER = worker_name (else API_NOT_FOUND, as
 * a missing one; runtime_logs_target's check). ret_ref gets its id and,
 * when ret_fs_bytes is not NULL, *ret_fs_bytes the size of its filesystem
 * as far as the runtime knows it (a download of the sandbox cannot honestly
 * hold more content): Docker the image's size plus the disk quota
 * (RUNTIME_LABEL_DISK_MIB), a driver's sandbox its disk quota; 0 when
 * unknown (no quota). */
int runtime_files_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                         int64_t *ret_fs_bytes, api_error_t *err);

/* Streams an upload into container req->ref, pulling its bytes from
 * req->read as the runtime takes them (never the whole upload in memory).
 * TAR: the bytes are a tar stream unpacked into req->path (a directory),
 * members never outside the container's root; RAW: exactly req->size bytes
 * written as req->path with req->mode (an atomic end: the file is never
 * complete unless the upload's end was seen). 0 with *ret_bytes the upload
 * bytes once the runtime confirmed; errors: API_PAYLOAD_TOO_LARGE (over
 * max_bytes, or over what the sandbox's disk quota has left: the message
 * says which), API_INVALID_ARGUMENT (the runtime refused the archive, a raw
 * size mismatch, a path that is not a directory, a path the backend cannot
 * reach: gVisor's own tmpfs), API_NOT_FOUND (no such
 * container or directory), API_CONFLICT (the container is not running),
 * API_CANCELLED (aborted upload, a stop descriptor, the worker stopping),
 * API_RUNTIME_ERROR. A backend without the operation: API_UNAVAILABLE. */
int runtime_files_put(runtime_t *rt, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err);

/* Streams req->path out of container req->ref: on_stat once, then the body
 * through on_data: TAR the runtime's tar stream as is; RAW the regular
 * file's bytes only (anything else is API_INVALID_ARGUMENT "... is a
 * directory; use the tar form" before on_stat); LIST one JSON document
 * {"entries":[{"name","type","size","mode","mtime","link_target"}],
 * "truncated":bool} of its direct children (at most SBX_FILES_LIST_MAX).
 * 0 when it ended as asked (or a callback or stop descriptor ended it);
 * API_NOT_FOUND for a missing path, API_INVALID_ARGUMENT for one the
 * backend cannot reach (as for put); an error after on_stat means the body
 * stopped midway. A backend without the operation: API_UNAVAILABLE. */
int runtime_files_get(runtime_t *rt, const runtime_files_get_req_t *req, api_error_t *err);

/* ---- interactive shells (docs/worker.md "Shells") --------------------- */

/* A command on a terminal in a sandbox, held by the backend. */
typedef struct runtime_shell runtime_shell_t;

/* Output the backend read while starting the shell: to be sent before
 * anything read from the stream (valid until runtime_shell_close). */
typedef struct runtime_shell_early {
    const char *data;
    size_t len;
} runtime_shell_early_t;

typedef struct runtime_shell_req {
    const char *ref;          /* the container (runtime_files_target) */
    const char *const *argv;  /* argc strings */
    size_t argc;
    unsigned cols, rows;      /* the terminal's size, 1..SHELLFRAME_SIZE_MAX (tty only) */
    bool tty;                 /* false: no terminal; the output is framed (below) */
    const char *const *env;   /* envc "K=V" strings added to the sandbox's (may be NULL) */
    size_t envc;
    const char *cwd;          /* NULL: the sandbox's working directory */
} runtime_shell_req_t;

/* Without a terminal, what is read from a shell's stream is framed: an
 * 8-byte header (byte 0 the stream, 1 stdout or 2 stderr, any other to be
 * skipped; bytes 4..7 the payload's length, big-endian), then the payload
 * (Docker's own framing of an exec without a TTY). */
#define RUNTIME_SHELL_MUX_HEADER 8

/* Undoes that framing from bytes read in pieces of any size: emit gets each
 * stdout (1) or stderr (2) payload piece in order (other streams are
 * skipped); a negative value from emit stops and is returned. Zeroed to
 * start. Used by the forwarder's shells and envd's processes. */
typedef struct runtime_shell_mux {
    unsigned char hdr[RUNTIME_SHELL_MUX_HEADER];
    size_t hdr_len;
    uint32_t left;                /* payload bytes left of the current frame */
    int stream;                   /* its stream */
} runtime_shell_mux_t;
int runtime_shell_mux_push(runtime_shell_mux_t *m, const char *p, size_t n,
                           int (*emit)(void *ud, int stream, const char *p, size_t n), void *ud);

/* Starts req->argv in container req->ref: on a new terminal (req->tty: a
 * pseudo-terminal, stdout and stderr are one stream), or with pipes
 * (!req->tty: the output framed as RUNTIME_SHELL_MUX_HEADER says; a write
 * shutdown of the stream closes the command's stdin). *ret_fd is a
 * nonblocking two-way stream owned by *ret: bytes written to it are the
 * command's input, bytes read from it its output; it ends (reads 0) when the command has exited.
 * Errors: API_SANDBOX_EXITED (the container is not running),
 * API_RUNTIME_ERROR, API_CANCELLED; a backend without shells:
 * API_UNAVAILABLE. *ret_early: output already read, to send first. */
int runtime_shell_open(runtime_t *rt, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                       runtime_shell_early_t *ret_early, api_error_t *err);

/* Sets the terminal's size (1..SHELLFRAME_SIZE_MAX each). */
int runtime_shell_resize(runtime_t *rt, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err);

/* After the stream ended: the command's exit code (128+N for a signal N). */
int runtime_shell_exit_code(runtime_t *rt, runtime_shell_t *s, int *ret_code, api_error_t *err);

/* Ends the shell: a command still running is killed with its process tree,
 * the stream closed, s freed. NULL is fine. */
void runtime_shell_close(runtime_t *rt, runtime_shell_t *s);

/* ---- snapshots (docs/snapshots.md) ------------------------------------ */

typedef struct runtime_snapshot_req {
    const char *ref;          /* the sandbox's object, checked by the caller (runtime_check_owner) */
    const char *snapshot_id;  /* snp_... */
    const char *tenant;
    const char *cluster_id;   /* labels it; may be NULL */
    const char *worker_name;  /* labels it; may be NULL */
    /* A template version's defaults (spec_snapshot_config_from_json's
     * form: env, workdir, user, cmd, entrypoint, expose), saved with it for
     * the sandboxes made from it; NULL: none (borrowed) */
    struct json_object *config;
    /* Save the sandbox's memory too (microvm): a runtime that cannot
     * refuses (API_INVALID_ARGUMENT), never a snapshot of files alone. */
    bool memory;
    /* import: the class of the snapshot's sandbox (the backend that takes the copy) */
    isolation_t isolation;
} runtime_snapshot_req_t;

/* What a snapshot holds, as the runtime measured it. */
typedef struct runtime_snapshot {
    char id[SBX_ID_MAX];
    char tenant[64];
    int64_t size_bytes;       /* what it adds to its base (the sandbox's changes); -1 unknown */
    int64_t image_bytes;      /* its whole filesystem; -1 unknown */
    bool memory;              /* it holds the sandbox's memory too */
} runtime_snapshot_t;

/* Saves the filesystem of sandbox object req->ref as snapshot
 * req->snapshot_id (Docker: its writable layer committed as an image, the
 * container paused meanwhile), labelled for the snapshot, its tenant,
 * cluster and worker; a sandbox from it (a create whose spec names it in
 * "from") starts with those files. Idempotent: a snapshot of that id that
 * exists already is measured and returned. *ret gets its measure.
 * Errors: API_NOT_FOUND (no such object), API_RUNTIME_ERROR, API_CANCELLED;
 * a backend without snapshots: API_UNAVAILABLE. */
int runtime_snapshot_create(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                            api_error_t *err);

/* The snapshots this worker made for installation cluster_id (NULL: any)
 * that the runtime holds: at most RUNTIME_MAX_SNAPSHOTS, a malloc'd array
 * (free). A backend without snapshots: 0 with none. */
int runtime_snapshot_list(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_snapshot_t **ret,
                          size_t *ret_n, api_error_t *err);

/* Removes snapshot snapshot_id if this worker (worker_name) made it; gone
 * already: 0. A snapshot a sandbox still runs from: API_CONFLICT (its
 * bytes go once the last such sandbox does). */
int runtime_snapshot_remove(runtime_t *rt, const char *snapshot_id, const char *worker_name, api_error_t *err);

/* A snapshot sent to another worker: snapshot_id, one this worker holds,
 * as its backend's archive (Docker: a docker-save tar; a driver: the tar of
 * its files, docs/runtime-drivers.md) handed to on_data in pieces (< 0 from it stops the
 * export, not an error); a stop descriptor readable ends it too. */
typedef struct runtime_snapshot_export_req {
    const char *snapshot_id;
    const char *worker_name;
    int (*on_data)(void *ud, const char *data, size_t n);
    void *ud;
    const int *stop_fds;
    size_t nstop_fds;
} runtime_snapshot_export_req_t;
int runtime_snapshot_export(runtime_t *rt, const runtime_snapshot_export_req_t *req, api_error_t *err);

/* Takes snapshot req->snapshot_id, made by another worker of this
 * installation, from the tar read (as runtime_snapshot_export sent it),
 * after checking that it is that snapshot of req->tenant and cluster, and
 * keeps it as this worker's copy (sandboxes start from it here, it is
 * listed and removed as this worker's). Idempotent. *ret its measure. */
int runtime_snapshot_import(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_files_read_fn read, void *ud,
                            runtime_snapshot_t *ret, api_error_t *err);

/* The local image of snapshot req->spec->from that this backend holds for
 * req's tenant, cluster and worker (Docker: the commit or its copy), into
 * image: 0, or a negative code (API_IMAGE_UNAVAILABLE: not here). For a
 * backend that starts sandboxes from an image's files (microvm): a
 * container's snapshot or template starts a VM with its filesystem. */
int runtime_snapshot_image(runtime_t *rt, const runtime_create_req_t *req, char *image, size_t len,
                           api_error_t *err);

/* ---- volumes (docs/volumes.md) ----------------------------------------- */

/* A volume this worker holds. */
typedef struct runtime_volume {
    char id[SBX_ID_MAX];
    char tenant[64];
    int64_t size_mib;
    bool mounted;             /* a sandbox here mounts it now */
} runtime_volume_t;

/* Whether this worker can hold volumes (why gets the reason when not). */
bool runtime_volume_support(runtime_t *rt, char *why, size_t whylen);

/* The volumes this worker holds (a malloc'd array; free), after releasing
 * the mounts of sandboxes no object of which is left here. A backend
 * without volumes: 0 with none. */
int runtime_volume_list(runtime_t *rt, runtime_volume_t **ret, size_t *ret_n, api_error_t *err);

/* Removes volume volume_id's bytes; gone already: 0; mounted by a sandbox
 * here: API_CONFLICT (a later heartbeat tries again). */
int runtime_volume_remove(runtime_t *rt, const char *volume_id, api_error_t *err);

/* A volume as a disk image: a sandbox of a backend that takes disks, not
 * mounts (microvm), gets it so; claimed as a mount is (read-write one
 * sandbox's, read-only shared) until runtime_volume_release. */
typedef struct runtime_disk {
    char path[512];           /* the volume's ext4 image on this host */
    const char *target;       /* the spec's mount path (borrowed from it) */
    bool read_only;
} runtime_disk_t;

/* Claims the volumes of req's spec for sandbox req->sandbox_id as disks
 * (each made at first use, as a mount would): *ret (malloc'd, free) with
 * one per spec volume. Errors as a create's. A backend without volumes:
 * API_ISOLATION_UNAVAILABLE. */
int runtime_volume_disks(runtime_t *rt, const runtime_create_req_t *req, runtime_disk_t **ret, size_t *ret_n,
                         api_error_t *err);

/* Lets go of whatever volume sandbox_id holds here (mounts and disk
 * claims). Idempotent; no backend with volumes: nothing. */
void runtime_volume_release(runtime_t *rt, const char *sandbox_id);

/* Releases the disk claims of sandboxes that are not in live (n ids; those
 * are the sandboxes a disk backend still holds) and older than a create. */
void runtime_volume_sweep_disks(runtime_t *rt, const char *const *live, size_t n);

/* ---- a NIC behind the egress filter (docs/network.md) ------------------- */

/* A sandbox of a backend without a filter of its own (microvm) reaches the
 * network through a tap of its own, a point-to-point link whose traffic
 * another backend's egress filter takes as it takes a container's. */
typedef struct runtime_nic {
    char tap[16];             /* the tap's name, [a-z0-9] */
    char host[16];            /* the tap's address: the guest's gateway and resolver */
    char guest[16];           /* the guest's address */
    unsigned prefix;          /* of both */
} runtime_nic_t;

/* Whether this backend filters NICs (why gets the reason when not). */
bool runtime_nic_support(runtime_t *rt, char *why, size_t whylen);
/* Whether this backend takes a NIC in a create (runtime_create_req_t.nic). */
bool runtime_takes_nic(const runtime_t *rt);
/* A NIC for sandbox req->sandbox_id (network open): its addresses, and the
 * filter has its rules (req->spec->egress; none set: every name) and the
 * tenant's req->egress_allow before anything of it runs. *ret. Errors as a
 * create's; API_ISOLATION_UNAVAILABLE without a filter. */
int runtime_nic_attach(runtime_t *rt, const runtime_create_req_t *req, runtime_nic_t *ret, api_error_t *err);
/* Sandbox sandbox_id's NIC's rules from now on (runtime_egress_set's
 * egress); API_CONFLICT when it has no NIC here. */
int runtime_nic_egress_set(runtime_t *rt, const char *sandbox_id, json_object *egress, api_error_t *err);
/* Forgets sandbox_id's NIC (idempotent). */
void runtime_nic_detach(runtime_t *rt, const char *sandbox_id);
/* Forgets the NICs of sandboxes not in live (n ids) made more than a
 * create's time ago (removed while the worker was down). */
void runtime_nic_sweep(runtime_t *rt, const char *const *live, size_t n);

/* ---- pause and resume (docs/pause.md) ---------------------------------- */

/* Stops sandbox object ref's processes and keeps the object with its
 * files (Docker: the container stopped, not removed). *ret_memory: whether
 * its memory was kept, so that a resume continues its processes (false: a
 * resume starts its main process again). Pausing a paused one succeeds.
 * API_NOT_FOUND (no such object), API_RUNTIME_ERROR, API_CANCELLED; a
 * backend without it: API_UNAVAILABLE. */
int runtime_pause(runtime_t *rt, const char *ref, bool *ret_memory, api_error_t *err);

/* Runs a paused sandbox object again (same object, same files), confirmed
 * running as a create is, with the egress rules it was made with.
 * Resuming a running one succeeds. API_SANDBOX_EXITED when it does not
 * stay up (*ret_exit filled when not NULL: release it), API_NOT_FOUND,
 * API_RUNTIME_ERROR; a backend without it: API_UNAVAILABLE. */
int runtime_resume(runtime_t *rt, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                   api_error_t *err);

/* ---- egress rules (docs/network.md) ----------------------------------- */

/* Gives sandbox object ref (of sandbox_id, made with egress rules) the
 * rules egress ({"allow","deny","default"}, canonical; borrowed) from now
 * on, kept over its pause and resume and the worker's restarts until it is
 * removed; connections the new rules refuse are closed. API_NOT_FOUND,
 * API_CONFLICT (made without rules), API_RUNTIME_ERROR; a backend without
 * it: API_ISOLATION_UNAVAILABLE. */
int runtime_egress_set(runtime_t *rt, const char *sandbox_id, const char *ref, json_object *egress,
                       api_error_t *err);

/* Takes at most max of the egress filter's records (each {"at_ms",
 * "sandbox","kind","name","addr"?,"port"|"qtype","verdict","why",
 * "bytes_out"?,"bytes_in"?}) into *ret (a new array), oldest first;
 * *ret_dropped: how many it let go since the last call. A backend without
 * a filter: API_ISOLATION_UNAVAILABLE. */
int runtime_egress_drain(runtime_t *rt, int max, json_object **ret, int64_t *ret_dropped, api_error_t *err);

/* One sandbox runtime_disk_enforce stopped. */
typedef struct runtime_disk_stop {
    char sandbox_id[SBX_ID_MAX];
    int64_t used_bytes;       /* its writable layer when measured */
    int64_t quota_mib;
} runtime_disk_stop_t;

/* How the backend holds sandboxes to their disk quota (spec disk_mib), one
 * line for the log: "storage driver: ..." when the storage driver bounds
 * the writable layer itself, "watched: ..." when runtime_disk_enforce must
 * measure it. */
const char *runtime_disk_mode(const runtime_t *rt);

/* One pass of the disk watch: measures the writable layer of every running
 * sandbox of cluster_id made by worker_name (as runtime_inventory selects
 * them) that carries RUNTIME_LABEL_DISK_MIB, each measurement bounded to a
 * few seconds, and kills those over their quota; their inventory entries
 * then say disk_quota_exceeded. Writes at most max stopped sandboxes into
 * ret and their number into *ret_n, also when it returns an error (a
 * listing or a kill that failed; the others went on). A backend without the operation (NULL)
 * stops nothing and returns 0. */
int runtime_disk_enforce(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_disk_stop_t *ret,
                         size_t max, size_t *ret_n, api_error_t *err);

/* Makes in-flight and later calls give up soon after *flag becomes non-zero
 * (worker shutdown): a running exec is killed as on a timeout, a pull or
 * any other request to the runtime is abandoned, and the call fails with
 * API_CANCELLED. Set it once, before the runtime is shared between
 * threads; NULL clears. */
void runtime_set_cancel_flag(runtime_t *rt, const atomic_int *flag);

/* Closes the runtime and frees it; NULL is fine. */
void runtime_free(runtime_t *rt);

/* ---- for backends ------------------------------------------------------ */

/* A backend's operations: one per runtime_* function above (same promises),
 * taking the runtime_t that heads the backend's own struct. Every entry is
 * set but files_*, shell_*, disk_mode and disk_enforce; name is what runtime_name returns. */
typedef struct runtime_ops {
    const char *name;
    /* The prefix of every ref the backend hands out (NULL or "": none), by
     * which a composite runtime finds the backend of a ref. */
    const char *ref_prefix;
    int (*ping)(runtime_t *rt, long timeout_ms, api_error_t *err);
    int (*create)(runtime_t *rt, const runtime_create_req_t *req, char ret_ref[80], runtime_exit_t *ret_exit,
                  api_error_t *err);
    int (*exec)(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err);
    int (*remove)(runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err);
    int (*check_owner)(runtime_t *rt, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                       api_error_t *err);
    int (*inventory)(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                     size_t *ret_n, api_error_t *err);
    int (*images)(runtime_t *rt, char ***ret, size_t *ret_n, api_error_t *err);
    /* optional (NULL: none) */
    int (*image_details)(runtime_t *rt, struct json_object **ret, api_error_t *err);
    int (*dial)(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err);
    int (*logs_target)(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                       api_error_t *err);
    int (*logs_stream)(runtime_t *rt, const char *ref, const runtime_logs_req_t *req, api_error_t *err);
    size_t (*isolation_classes)(const runtime_t *rt, isolation_t *ret, size_t max);
    unsigned (*network_modes)(const runtime_t *rt, isolation_t cls);
    const char *(*probe_result)(const runtime_t *rt, isolation_t cls);
    const char *(*network_unavailable)(const runtime_t *rt, isolation_t cls, net_mode_t mode);
    void (*set_cancel_flag)(runtime_t *rt, const atomic_int *flag);
    /* Optional (NULL: no file transfers; files_target then falls back to
     * logs_target's check). */
    int (*files_target)(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                        int64_t *ret_fs_bytes, api_error_t *err);
    int (*files_put)(runtime_t *rt, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err);
    int (*files_get)(runtime_t *rt, const runtime_files_get_req_t *req, api_error_t *err);
    /* Optional (NULL: no shells). */
    int (*shell_open)(runtime_t *rt, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                      runtime_shell_early_t *ret_early, api_error_t *err);
    int (*shell_resize)(runtime_t *rt, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err);
    int (*shell_exit_code)(runtime_t *rt, runtime_shell_t *s, int *ret_code, api_error_t *err);
    void (*shell_close)(runtime_t *rt, runtime_shell_t *s);
    /* Optional (NULL: no disk watch; a test fake). */
    const char *(*disk_mode)(const runtime_t *rt);
    int (*disk_enforce)(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_disk_stop_t *ret,
                        size_t max, size_t *ret_n, api_error_t *err);
    /* Optional (NULL: no snapshots; a create whose spec has "from" is then
     * refused with API_ISOLATION_UNAVAILABLE). */
    int (*snapshot_create)(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                           api_error_t *err);
    int (*snapshot_list)(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_snapshot_t **ret,
                         size_t *ret_n, api_error_t *err);
    int (*snapshot_remove)(runtime_t *rt, const char *snapshot_id, const char *worker_name, api_error_t *err);
    int (*snapshot_export)(runtime_t *rt, const runtime_snapshot_export_req_t *req, api_error_t *err);
    int (*snapshot_import)(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_files_read_fn read, void *ud,
                           runtime_snapshot_t *ret, api_error_t *err);
    int (*snapshot_image)(runtime_t *rt, const runtime_create_req_t *req, char *image, size_t len,
                          api_error_t *err);
    /* Optional (NULL: no volumes; a create whose spec mounts one is then
     * refused with API_ISOLATION_UNAVAILABLE). */
    bool (*volume_support)(runtime_t *rt, char *why, size_t whylen);
    int (*volume_list)(runtime_t *rt, runtime_volume_t **ret, size_t *ret_n, api_error_t *err);
    int (*volume_remove)(runtime_t *rt, const char *volume_id, api_error_t *err);
    int (*volume_disks)(runtime_t *rt, const runtime_create_req_t *req, runtime_disk_t **ret, size_t *ret_n,
                        api_error_t *err);
    void (*volume_release)(runtime_t *rt, const char *sandbox_id);
    void (*volume_sweep_disks)(runtime_t *rt, const char *const *live, size_t n);
    /* Optional (NULL: no pause and resume). */
    int (*pause)(runtime_t *rt, const char *ref, bool *ret_memory, api_error_t *err);
    int (*resume)(runtime_t *rt, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                  api_error_t *err);
    /* Optional (NULL: no live change of egress rules). */
    int (*egress_set)(runtime_t *rt, const char *sandbox_id, const char *ref, json_object *egress,
                      api_error_t *err);
    int (*egress_drain)(runtime_t *rt, int max, json_object **ret, int64_t *ret_dropped, api_error_t *err);
    /* Optional (NULL: no NICs filtered here; runtime_nic_*). */
    bool (*nic_support)(runtime_t *rt, char *why, size_t whylen);
    int (*nic_attach)(runtime_t *rt, const runtime_create_req_t *req, runtime_nic_t *ret, api_error_t *err);
    int (*nic_egress_set)(runtime_t *rt, const char *sandbox_id, json_object *egress, api_error_t *err);
    void (*nic_detach)(runtime_t *rt, const char *sandbox_id);
    void (*nic_sweep)(runtime_t *rt, const char *const *live, size_t n);
    /* Optional (NULL: a create takes no NIC). */
    bool (*takes_nic)(const runtime_t *rt);
    void (*free)(runtime_t *rt);   /* never called with NULL */
    /* Whether exec honours exec_spec_t.user (false: an exec with a user is
     * refused with API_ISOLATION_UNAVAILABLE, never run as root). */
    bool exec_user;
} runtime_ops_t;

/* A composite of n backends (1..4; taken: the array's entries are set to
 * NULL and freed with *ret), worker/runtime_multi.c: the union of their
 * classes, a create by class (the first backend offering it exactly), later
 * calls by ref prefix or by asking each backend, the union of their
 * inventories. 0, or SBX_EINVAL / SBX_ENOMEM (err; nothing taken). */
int runtime_multi_new(runtime_t **backends, size_t n, runtime_t **ret, api_error_t *err);

/* The common head of every backend's runtime: each embeds it FIRST
 * (struct docker_runtime { runtime_t base; ... }), so a runtime_t * is also
 * a pointer to the backend's struct. */
struct runtime {
    const runtime_ops_t *ops;
};

#endif
