/* What the files of the Docker backend (worker/docker/) share: its limits,
 * its runtime struct and the functions one file gives the others. Not for
 * use outside worker/docker/ (runtime_docker.h is the backend's face). */
#ifndef SBX_DOCKER_INTERNAL_H
#define SBX_DOCKER_INTERNAL_H

#include <curl/curl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "docker_config.h"
#include "docker_parse.h"
#include "runsc.h"
#include "runtime_docker.h"
#include "sbuf.h"

#define DOCKER_BASE_URL          "http://localhost/v1.41"
/* An ordinary Engine call (inspect, create, start, remove, list). */
#define DOCKER_CALL_TIMEOUT_MS   60000L
/* Removing a running container with force may wait for it to die. */
#define DOCKER_REMOVE_TIMEOUT_MS 120000L
/* A pull of a large image over a slow link. */
#define DOCKER_PULL_TIMEOUT_MS   (30L * 60L * 1000L)
/* Each step of the gVisor probe (import, create, start, logs, remove); the
 * wait for the probe container to exit is bounded separately. */
#define DOCKER_PROBE_CALL_MS     30000L
#define DOCKER_PROBE_WAIT_MS     30000L
/* A probe container left by a worker that died mid-probe is removed once
 * it is this old (a younger one may be another worker's running probe). */
#define DOCKER_PROBE_STALE_S     600
/* The probe image, made locally from an in-memory tar. */
#define DOCKER_PROBE_REPO        "sandbox-probe"
#define DOCKER_PROBE_TAG         "1"
#define DOCKER_PROBE_IMAGE       DOCKER_PROBE_REPO ":" DOCKER_PROBE_TAG
/* Docker network names (and the worker's settings for them). */
#define DOCKER_NETWORK_NAME_MAX  128
/* A bridge interface name (IFNAMSIZ) and the worker's iptables chains
 * named after it ("SBX-EGRESS-" + bridge; iptables allows 28 bytes). */
#define DOCKER_EGRESS_BRIDGE_MAX 16
#define DOCKER_EGRESS_CHAIN_MAX  32
/* One line of the pull progress stream; longer lines are skipped. */
#define DOCKER_PULL_LINE_BYTES   (64u * 1024u)
/* Processes of one exec the timeout kill walks at most. */
#define DOCKER_KILL_MAX_PIDS     4096
/* How long to wait for Docker to record an exec's exit code after its
 * stream ended. */
#define DOCKER_EXIT_WAIT_MS      3000
/* The inspect behind a routed connection: the controller is waiting. */
#define DOCKER_ROUTE_TIMEOUT_MS  10000L

/* The details of a stopped container (inspect, logs): a heartbeat waits
 * for them. */
#define DOCKER_DETAIL_TIMEOUT_MS 5000L
/* All the details one inventory fetches: past this, the rest wait for the
 * next heartbeat (a slow Docker must not make a beat late). */
#define DOCKER_DETAILS_BUDGET_MS 2000
/* Log entries asked of Docker for a stopped container's output tail (of
 * which the last SBX_OUTPUT_TAIL_MAX bytes are kept). */
#define DOCKER_LOGS_TAIL_LINES   100
/* After a start, how long the worker waits at most for docker-init to have
 * exec'd the main process (or for the container to stop), and how often it
 * looks meanwhile. */
#define DOCKER_START_CONFIRM_MS  2000
#define DOCKER_START_POLL_US     5000

#define DOCKER_CLASSES 3   /* isolation_t values */
#define DOCKER_MODES   4   /* net_mode_t values and NET_OFFER_FILTERED */

/* Written by runtime_docker_open, read-only afterwards (so shared by the
 * executor threads without a lock). */
typedef struct docker_runtime {
    runtime_t base;   /* first: ops = docker_ops */
    char *socket_path;
    const atomic_int *cancel;
    char gvisor_runtime[DOCKER_NETWORK_NAME_MAX];   /* "" when disabled */
    char worker_name[160];                          /* labels the probe; "" when not given */
    char image_registries[SBX_MAX_IMAGE_REGISTRIES_BYTES + 1]; /* checked again before every pull */
    char runsc_exe[RUNSC_PATH_MAX];                 /* dockerd's path of it, when found here */
    char net_name[DOCKER_MODES][DOCKER_NETWORK_NAME_MAX]; /* [NET_RESTRICTED], [NET_OPEN], [NET_OFFER_FILTERED] */
    /* the egress filter of the filtered network (docker_filter.c) */
    bool filter_ready, filter_mu_init;
    pthread_mutex_t filter_mu;                       /* one control call at a time */
    pid_t filter_pid;
    int filter_tcp_port, filter_dns_port, filter_udp_port; /* udp: the first of FILTER_UDP_PORTS */
    char filter_bridge[DOCKER_EGRESS_BRIDGE_MAX], filter_gw[48];
    char filter_cmd[RUNSC_PATH_MAX], filter_tool[RUNSC_PATH_MAX];
    char filter_upstream[128], filter_control[108];
    char filter_rules_dir[108];                      /* rules changed live, by sandbox (over the labels') */
    char filter_upstream_ca[RUNSC_PATH_MAX];         /* --upstream-ca; "": the system's CAs */
    char nic_subnet[48];                             /* microVMs' /30s come from it; "": no NICs */
    char nic_prefix[8];                              /* their taps' names: this and the slot */
    uint32_t nic_base;                               /* the subnet (host order) */
    unsigned nic_slots;                              /* how many /30s it holds */
    char nic_why[200];                               /* "" NICs are filtered here, else why not */
    bool offered[DOCKER_CLASSES];
    bool considered[DOCKER_CLASSES];                 /* has a probe line */
    unsigned net_modes[DOCKER_CLASSES];
    char probe[DOCKER_CLASSES][RUNTIME_PROBE_TEXT_MAX];
    char net_why[DOCKER_CLASSES][DOCKER_MODES][RUNTIME_PROBE_TEXT_MAX];
    bool storage_quota;                              /* StorageOpt size works (docker_disk_discover) */
    char disk_mode[RUNTIME_PROBE_TEXT_MAX];          /* runtime_disk_mode */
    bool egress_ready;                               /* the open network's rules are set (docker_egress.c) */
    bool egress_docker_user;                         /* jump from DOCKER-USER (else FORWARD) */
    char egress_bridge[DOCKER_EGRESS_BRIDGE_MAX];    /* the open network's bridge interface */
    char egress_tool[2][RUNSC_PATH_MAX];             /* iptables, ip6tables */
    /* Whether any sandbox may have allow rules: set by every add, cleared
     * by a sweep that found none (and saw no add meanwhile). A delete runs
     * iptables only then: two processes per delete otherwise. */
    atomic_bool egress_rules_any;
    atomic_uint egress_adds;
    /* The Engine's image list, kept DOCKER_IMAGES_REUSE_MS: a heartbeat
     * asks for the names and then their details (docker_image_list). */
    pthread_mutex_t images_mu;
    struct json_object *images_list;
    int64_t images_at_ms;
    /* Volumes (docker_volumes.c): where they live, and whether this worker
     * can hold them (volumes_why says why not). */
    bool volumes_ok;
    char volume_dir[256];
    char volumes_why[160];
    char mkfs_ext4[RUNSC_PATH_MAX];
} docker_runtime_t;

typedef struct docker_reply {
    long status;
    sbuf_t body;      /* bounded by SBX_MAX_DOCKER_REPLY_BYTES */
} docker_reply_t;

/* An image pull's (or import's) progress stream: the current line and the
 * first error Docker reported in it. */
typedef struct docker_pull {
    sbuf_t line;
    char error[400];
    bool failed;
} docker_pull_t;

/* ---- docker_engine.c --------------------------------------------------- */

/* A new easy handle for method path on the Engine socket; body (body_len
 * bytes of content_type, may be NULL) must outlive the transfer. The caller
 * owns *ret_headers. */
CURL *docker_handle_new(const docker_runtime_t *rt, const char *method, const char *path, const void *body,
                        size_t body_len, const char *content_type, long timeout_ms,
                        struct curl_slist **ret_headers);

/* True once the cancel flag (runtime_set_cancel_flag) is set. */
bool docker_cancelled(const docker_runtime_t *rt);

/* Maps a failed transfer to an error. */
int docker_transport_error(const docker_runtime_t *rt, CURLcode cr, api_error_t *err);

/* A streamed Engine request on its own multi handle, which the caller's
 * loop drives (curl_multi_perform, curl_multi_poll on m) while it watches
 * its own deadline, stop descriptors and the cancel flag: no progress
 * callback, no timeout. */
typedef struct docker_multi {
    CURL *h;
    CURLM *m;
    struct curl_slist *hl;
    bool added;
} docker_multi_t;

/* Opens dm for method path (body: as docker_handle_new), handing the
 * answer to write_cb with ud. 0, or SBX_ENOMEM; docker_multi_close dm in
 * both cases. */
int docker_multi_open(docker_multi_t *dm, const docker_runtime_t *rt, const char *method, const char *path,
                      const void *body, size_t body_len, const char *content_type, curl_write_callback write_cb,
                      void *ud);

/* One curl_multi_perform round: 0 with *running (the transfer goes on),
 * or API_RUNTIME_ERROR "docker <what> stream: ...". */
int docker_multi_perform(docker_multi_t *dm, const char *what, int *running, api_error_t *err);

/* Once the transfer ended: its transport error (docker_transport_error),
 * or 0 with the HTTP status in *status when that is still 0. */
int docker_multi_result(docker_multi_t *dm, const docker_runtime_t *rt, long *status, api_error_t *err);

/* Frees what dm holds; a dm that was never opened (all zero) is fine. */
void docker_multi_close(docker_multi_t *dm);

/* Sends one request with an optional body (len bytes of content_type) and
 * hands the reply to write_cb. Returns 0 when Docker answered, whatever the
 * status. */
int docker_call_raw(const docker_runtime_t *rt, const char *method, const char *path, const void *data,
                    size_t len, const char *content_type, long timeout_ms,
                    size_t (*write_cb)(char *, size_t, size_t, void *), void *write_ud, long *ret_status,
                    api_error_t *err);

/* docker_call_raw with an optional JSON body. */
int docker_call_ex(const docker_runtime_t *rt, const char *method, const char *path, json_object *body,
                   long timeout_ms, size_t (*write_cb)(char *, size_t, size_t, void *), void *write_ud,
                   long *ret_status, api_error_t *err);

/* docker_call_ex keeping the reply (bounded) in *ret; release it with
 * docker_reply_release, also after a failure. */
int docker_call(const docker_runtime_t *rt, const char *method, const char *path, json_object *body,
                long timeout_ms, docker_reply_t *ret, api_error_t *err);

void docker_reply_release(docker_reply_t *r);

/* The reply as JSON (new reference), or NULL. */
json_object *docker_reply_json(const docker_reply_t *r);

/* The "Id" of what a create answered ({"Id":...}, a container or an exec)
 * into ret_id: false when there is none or it is not a usable name. */
bool docker_reply_id(const docker_reply_t *r, char ret_id[80]);

/* Docker's error message ({"message":...}) or the start of the raw body. */
void docker_reply_message(const docker_reply_t *r, char *out, size_t outlen);

/* Image references: what Docker's reference grammar allows, so the name can
 * go into a URL path as is. */
bool docker_image_ok(const char *s);

/* Splits "repo[:tag]" or "repo@digest" (repo may carry a registry with a
 * port) into repo and tag; the tag defaults to "latest". */
int docker_image_split(const char *image, char *repo, size_t repolen, char *tag, size_t taglen);

/* GET path as JSON (new reference in *ret) when Docker answers 200. */
int docker_get_json(docker_runtime_t *rt, const char *path, long timeout_ms, json_object **ret, api_error_t *err);

/* A filters={"KEY":["VALUE"]} query parameter, URL-escaped (curl_free). */
char *docker_filter_param(const char *key, const char *value);

/* The Engine's image list (GET /images/json), reused for a moment: a
 * heartbeat's names, details and snapshots take one call. A copy the
 * caller owns. */
int docker_image_list(docker_runtime_t *rt, json_object **ret, api_error_t *err);

/* ---- pause and resume (docker_create.c) --------------------------------- */

/* The grace a paused sandbox's main process gets before it is killed. */
#define DOCKER_PAUSE_GRACE_S 5

int docker_rt_pause(runtime_t *base, const char *ref, bool *ret_memory, api_error_t *err);
int docker_rt_resume(runtime_t *base, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                     api_error_t *err);

/* ---- docker_volumes.c -------------------------------------------------- */

/* Finds out whether volumes can live under dir (root, loop devices,
 * mkfs.ext4) and makes it: rt->volumes_ok, or volumes_why. */
void docker_volumes_probe(docker_runtime_t *rt, const char *dir);
/* Mounts the create's volumes for its sandbox (making a volume's file
 * system on its first mount): *ret_mounts gets the container's
 * HostConfig.Mounts. On error nothing stays mounted. */
int docker_volumes_attach(docker_runtime_t *rt, const runtime_create_req_t *req, json_object **ret_mounts,
                          api_error_t *err);
/* Unmounts what sandbox_id mounted (its container is gone). */
void docker_volumes_release(docker_runtime_t *rt, const char *sandbox_id);
bool docker_rt_volume_support(runtime_t *base, char *why, size_t whylen);
int docker_rt_volume_list(runtime_t *base, runtime_volume_t **ret, size_t *ret_n, api_error_t *err);
int docker_rt_volume_remove(runtime_t *base, const char *volume_id, api_error_t *err);
int docker_rt_volume_disks(runtime_t *base, const runtime_create_req_t *req, runtime_disk_t **ret, size_t *ret_n,
                           api_error_t *err);
void docker_rt_volume_release(runtime_t *base, const char *sandbox_id);
int docker_rt_snapshot_image(runtime_t *base, const runtime_create_req_t *req, char *image, size_t len,
                             api_error_t *err);
void docker_rt_volume_sweep_disks(runtime_t *base, const char *const *live, size_t n);
/* Runs tool with argv (no shell), its output's first line (all: every
 * line) into out; the exit status, or -1 when it cannot run (docker_egress.c). */
int docker_tool_run(const char *tool, const char *const *argv, char *out, size_t outlen, bool all);
/* Finds an executable in the system directories (docker_egress.c). */
bool docker_tool_find(const char *name, char out[RUNSC_PATH_MAX]);

/* The bridge interface of the worker's network of mode (net_mode_t or
 * NET_OFFER_FILTERED): its bridge.name option, else "br-" and the first 12
 * digits of its id (Docker's naming); ret_gw (when not NULL) its IPv4
 * gateway, which it must have (docker_egress.c). */
int docker_network_bridge(docker_runtime_t *rt, int mode, char ret[DOCKER_EGRESS_BRIDGE_MAX], char *ret_gw,
                          size_t gwlen, api_error_t *err);

/* ---- docker_filter.c --------------------------------------------------- */

/* The filtered network, its iptables rules and the egress filter (cmd;
 * NULL or "": sandbox-egress beside this program) asking upstream; a
 * refusal says why the mode is not offered. Sandboxes it finds running
 * with egress rules are given to the filter again. */
int docker_filter_setup(docker_runtime_t *rt, const char *cmd, const char *upstream, api_error_t *err);
void docker_filter_stop(docker_runtime_t *rt);
/* Starts the filter again when it died (the readiness probe). */
int docker_filter_check(docker_runtime_t *rt, api_error_t *err);
/* Tells the filter a container's address, rules (its labels) and tenant. */
int docker_filter_add(docker_runtime_t *rt, const char *sandbox_id, const char *container_id, api_error_t *err);
void docker_filter_drop(docker_runtime_t *rt, const char *sandbox_id);
/* A live change of a sandbox's rules (runtime_egress_set): kept in a file
 * of the worker's that wins over the container's label, and told to the
 * filter; the file is left as it was when the filter refuses. */
/* The worker's file of sandbox_id (sbx_ and [0-9a-z] only) under the
 * filter's directory in /run, with suffix (".json": live rules,
 * ".tls.json": CA and secrets); false when it has none. */
bool docker_filter_file(const docker_runtime_t *rt, const char *sandbox_id, const char *suffix, char *out,
                        size_t len);
/* That file's JSON object (a new one; the buffer read is wiped), or NULL. */
json_object *docker_filter_load(const docker_runtime_t *rt, const char *sandbox_id, const char *suffix);
/* Writes text into it atomically (mode 0600), or removes it (text NULL). */
int docker_filter_keep(const docker_runtime_t *rt, const char *sandbox_id, const char *suffix, const char *text,
                       api_error_t *err);

/* A live change of sandbox_id's rules: kept in its .json file, then told
 * to the filter by tell (ref its argument); the file is put back as it was
 * when tell fails. */
int docker_filter_rules_change(docker_runtime_t *rt, const char *sandbox_id, json_object *egress,
                               int (*tell)(docker_runtime_t *rt, const char *sandbox_id, const char *ref,
                                           api_error_t *err),
                               const char *ref, api_error_t *err);
/* One request to the filter's control socket, its answer (*ret, a new
 * object) when it says ok; else err. */
int docker_filter_call(docker_runtime_t *rt, json_object *req, json_object **ret, api_error_t *err);


/* ---- docker_nic.c: microVMs' NICs behind the filter ------------------------ */

/* Reads nic_subnet, names the taps; nic_why says why not when it cannot. */
void docker_nic_setup(docker_runtime_t *rt);
/* Gives the filter every NIC it had (a restarted worker or filter). */
void docker_nic_restore(docker_runtime_t *rt);
/* runtime_nic_* (runtime.h) */
bool docker_nic_support(runtime_t *base, char *why, size_t whylen);
int docker_nic_attach(runtime_t *base, const runtime_create_req_t *req, runtime_nic_t *ret, api_error_t *err);
int docker_nic_egress_set(runtime_t *base, const char *sandbox_id, json_object *egress, api_error_t *err);
void docker_nic_detach(runtime_t *base, const char *sandbox_id);
void docker_nic_sweep(runtime_t *base, const char *const *live, size_t n);

/* ---- docker_secrets.c --------------------------------------------------- */

/* A sandbox's secrets (the create assignment's, opened): a CA of its own is
 * made, kept with them in the worker's file for it, and put into container
 * cid's trust store (before it starts). */
int docker_secrets_prepare(docker_runtime_t *rt, const char *sandbox_id, const char *cid, json_object *secrets,
                           api_error_t *err);

/* The filter's records (runtime_egress_drain). */
int docker_filter_drain(docker_runtime_t *rt, int max, json_object **ret, int64_t *ret_dropped, api_error_t *err);
int docker_filter_egress_set(docker_runtime_t *rt, const char *sandbox_id, const char *ref, json_object *egress,
                             api_error_t *err);

/* ---- docker_snapshot.c ------------------------------------------------- */

/* A snapshot's commit (the container paused meanwhile). */
#define DOCKER_COMMIT_TIMEOUT_MS (10L * 60L * 1000L)

int docker_rt_snapshot_create(runtime_t *base, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                              api_error_t *err);
int docker_rt_snapshot_list(runtime_t *base, const char *cluster_id, const char *worker_name,
                            runtime_snapshot_t **ret, size_t *ret_n, api_error_t *err);
int docker_rt_snapshot_remove(runtime_t *base, const char *snapshot_id, const char *worker_name, api_error_t *err);
/* For a create from snapshot_id: checks that its image is here and is
 * this tenant's, cluster's and worker's (the controller's word is not
 * enough), and writes the image's name into image. API_IMAGE_UNAVAILABLE
 * naming the snapshot when it is not here (or is another's). */
int docker_rt_snapshot_export(runtime_t *base, const runtime_snapshot_export_req_t *req, api_error_t *err);
int docker_rt_snapshot_import(runtime_t *base, const runtime_snapshot_req_t *req, runtime_files_read_fn read,
                              void *ud, runtime_snapshot_t *ret, api_error_t *err);
/* The tag a worker keeps its copy of another's snapshot under. */
void docker_snapshot_copy_image(const char *snapshot_id, const char *worker_name, char *out, size_t outlen);
int docker_snapshot_image_for(docker_runtime_t *rt, const char *snapshot_id, const char *tenant,
                              const char *cluster_id, const char *worker_name, char *image, size_t imagelen,
                              api_error_t *err);

/* ---- docker_create.c --------------------------------------------------- */

/* Takes the error of the stream's current line, if any, into p. */
void docker_pull_line(docker_pull_t *p);

/* The pull reply is a stream of JSON objects, one per line; only the first
 * error is kept, so the stream itself is never stored. */
size_t docker_pull_write_cb(char *s, size_t size, size_t nmemb, void *ud);

/* How container id ended: its State (one inspect) and its output tail (one
 * logs call). A tail that cannot be read is only left out. */
int docker_container_exit(docker_runtime_t *rt, const char *id, runtime_exit_t *ret, api_error_t *err);

/* One line on how the container ended (common/observed's wording). */
void docker_exit_message(const runtime_exit_t *e, char *out, size_t outlen);

/* DELETE /containers/{ref} with force and its volumes: one already gone
 * (or being removed) is success. */
int docker_container_delete(docker_runtime_t *rt, const char *ref, api_error_t *err);

/* GET /containers/{name}/json: *ret is the parsed answer (release with
 * json_object_put) and *ret_id its "Id". A container that does not exist
 * is SBX_ENOTFOUND (err: API_NOT_FOUND); an answer without a valid Id is
 * API_RUNTIME_ERROR. */
int docker_container_inspect(docker_runtime_t *rt, const char *name, long timeout_ms, json_object **ret,
                             const char **ret_id, api_error_t *err);

/* The create operation of docker_ops (worker/runtime.h: runtime_create). */
int docker_rt_create(runtime_t *base, const runtime_create_req_t *req, char ret_ref[80],
                     runtime_exit_t *ret_exit, api_error_t *err);

/* ---- docker_inventory.c ------------------------------------------------ */

/* GET /containers/json with a label filter "key=value" (or just "key"). */
int docker_container_list(docker_runtime_t *rt, const char *label, json_object **ret, api_error_t *err);

/* The remove operation of docker_ops (worker/runtime.h: runtime_remove). */
int docker_rt_remove(runtime_t *base, const char *sandbox_id, const char *ref, api_error_t *err);

/* The inventory operation of docker_ops (worker/runtime.h: runtime_inventory). */
int docker_rt_inventory(runtime_t *base, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                        size_t *ret_n, api_error_t *err);

/* ---- docker_exec.c ----------------------------------------------------- */

/* True when /proc/<pid>/cgroup names the container: the pid is one of the
 * sandbox's processes in our pid namespace, not a stranger's. */
bool docker_pid_in_container(pid_t pid, const char *container_id);

/* Appends the children of pid (all its threads') to pids. */
void docker_pid_children(pid_t pid, pid_t *pids, size_t *n, size_t max);

/* The exec operation of docker_ops (worker/runtime.h: runtime_exec). */
int docker_rt_exec(runtime_t *base, const char *ref, const exec_spec_t *spec, size_t max_output,
                   const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err);

/* What the timeout kill of an exec in a gVisor sandbox needs, found before
 * the exec starts. */
typedef struct docker_gvisor_exec {
    bool gvisor;              /* the container runs under the gvisor runtime */
    char container_id[80];
    int after_pid;            /* largest pid in the sandbox before the exec; -1 unknown */
    char note[200];           /* why after_pid is unknown */
} docker_gvisor_exec_t;

/* Finds out whether ref runs under gVisor and, if so, the largest pid in
 * the sandbox now (before an exec starts). */
void docker_gvisor_exec_prepare(docker_runtime_t *rt, const char *ref, docker_gvisor_exec_t *gv);

/* GET /exec/{id}/json: Running, ExitCode (-1 while unknown), Pid and, when
 * ret_container is not NULL, the full container id. */
int docker_exec_inspect(docker_runtime_t *rt, const char *exec_id, bool *ret_running, int *ret_exit,
                        pid_t *ret_pid, char ret_container[80], api_error_t *err);

/* Kills exec_id's process tree (gv from docker_gvisor_exec_prepare); what
 * could not be killed goes to ret->warning. */
void docker_exec_kill(docker_runtime_t *rt, const char *exec_id, const docker_gvisor_exec_t *gv,
                      runtime_exec_result_t *ret);

/* ---- docker_shell.c ---------------------------------------------------- */

/* The shell operations of docker_ops (worker/runtime.h: runtime_shell_*). */
int docker_rt_shell_open(runtime_t *base, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                         runtime_shell_early_t *ret_early, api_error_t *err);
int docker_rt_shell_resize(runtime_t *base, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err);
int docker_rt_shell_exit_code(runtime_t *base, runtime_shell_t *s, int *ret_code, api_error_t *err);
void docker_rt_shell_close(runtime_t *base, runtime_shell_t *s);

/* ---- docker_attach.c --------------------------------------------------- */

/* A hijacked Engine connection: after the answer's head, fd carries the raw
 * stream both ways. */
typedef struct docker_hijack {
    int fd;          /* nonblocking, close-on-exec; -1 when closed */
    long status;     /* of the answer: 101 when upgraded */
    sbuf_t early;    /* 101: stream bytes read with the head; else the answer's body */
} docker_hijack_t;

/* Sends POST path (under the API version) with the body_len bytes of JSON
 * body and Upgrade: tcp, and reads the answer's head within timeout_ms.
 * 0 with *ret (any status: the caller checks for 101; docker_hijack_close
 * it), or API_RUNTIME_ERROR (docker unreachable, not HTTP, too slow) or
 * API_CANCELLED (the worker is shutting down) with *ret released. */
int docker_hijack_open(const docker_runtime_t *rt, const char *path, const char *body, size_t body_len,
                       long timeout_ms, docker_hijack_t *ret, api_error_t *err);
/* Closes the connection and frees early; NULL and a closed h are fine. */
void docker_hijack_close(docker_hijack_t *h);

/* ---- docker_dial.c ----------------------------------------------------- */

/* The dial operation of docker_ops (worker/runtime.h: runtime_dial). */
int docker_rt_dial(runtime_t *base, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err);

/* ---- docker_logs.c ----------------------------------------------------- */

/* Inspects the container of sandbox_id ("sbx-<id>") and checks that it is
 * this worker's sandbox: a container of that name made by another worker
 * on a shared Docker host, or not by us at all, is not. *ret (release with
 * json_object_put) and *ret_id (its id, owned by *ret) on success; a
 * missing or foreign container is API_NOT_FOUND "sandbox ID <missing>". */
int docker_sandbox_inspect(docker_runtime_t *rt, const char *sandbox_id, const char *worker_name,
                           const char *missing, json_object **ret, const char **ret_id, api_error_t *err);

/* The check_owner operation of docker_ops (worker/runtime.h:
 * runtime_check_owner): inspects the container and compares its labels. */
int docker_rt_check_owner(runtime_t *base, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                          api_error_t *err);

/* The logs_target operation of docker_ops (worker/runtime.h: runtime_logs_target). */
int docker_rt_logs_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                          api_error_t *err);

/* The logs_stream operation of docker_ops (worker/runtime.h: runtime_logs_stream). */
int docker_rt_logs_stream(runtime_t *base, const char *ref, const runtime_logs_req_t *req, api_error_t *err);

/* ---- runtime_docker.c -------------------------------------------------- */

/* Makes sure the network for mode exists as the worker would create it:
 * creates it when missing (a concurrent creator's 409 is fine: the winner's
 * network is checked instead; duplicates from racing creators are removed)
 * and refuses one set up differently. */
int docker_network_ensure(docker_runtime_t *rt, net_mode_t mode, api_error_t *err);

/* Makes the probe image (DOCKER_PROBE_IMAGE) from an in-memory tar when
 * Docker does not have it. */
int docker_probe_image(docker_runtime_t *rt, api_error_t *err);

/* ---- docker_egress.c --------------------------------------------------- */

/* Sets the open network's egress rules (docs/worker.md "Network modes"):
 * the chains SBX-EGRESS-<bridge> (forwarded traffic, jumped to from
 * DOCKER-USER) and SBX-HOST-<bridge> (traffic to the host, from INPUT), for
 * IPv4 and IPv6, flushed and refilled. Needs the network to exist. Fails
 * with API_ISOLATION_UNAVAILABLE saying why (no iptables, no CAP_NET_ADMIN);
 * then the worker must not offer open. */
int docker_egress_setup(docker_runtime_t *rt, api_error_t *err);

/* 0 when every egress rule is still present on the open network's current
 * bridge (or no rules were set up); otherwise API_ISOLATION_UNAVAILABLE
 * naming the first missing rule. Forks iptables -C once per rule. */
int docker_egress_check(docker_runtime_t *rt, api_error_t *err);

/* The tenant's egress_allow for one open sandbox (allow: canonical CIDRs
 * joined by ","): one RETURN rule per CIDR in SBX-EGRESS-<bridge> (and its
 * IPv6 twin), source the container's address on the open network, comment
 * "sbx-allow:ID", ahead of the blocks. Rules of the sandbox or from that
 * address already there are replaced. The HOST chain is never opened.
 * Nothing to do for an empty allow; API_ISOLATION_UNAVAILABLE when the
 * rules cannot be set (the create must then fail). */
int docker_egress_allow_add(docker_runtime_t *rt, const char *sandbox_id, const char *container_id,
                            const char *allow, api_error_t *err);

/* Deletes every allow rule of the sandbox (its delete). */
void docker_egress_allow_drop(docker_runtime_t *rt, const char *sandbox_id);

/* Deletes the allow rules whose sandbox has no running container with that
 * address any more (each inventory). When the containers cannot be listed
 * every rule stays. */
void docker_egress_allow_sweep(docker_runtime_t *rt);

/* ---- docker_disk.c ----------------------------------------------------- */

/* Measuring a writable layer (inspect ?size=true walks it). */
#define DOCKER_DISK_CALL_MS      5000L
/* The StorageOpt size the probe asks for (any size the driver takes). */
#define DOCKER_DISK_PROBE_SIZE   "64M"
/* Sandboxes one disk pass measures at most (the rest wait for the next). */
#define DOCKER_DISK_PASS_MAX     1024

/* Decides how disk quotas are held (rt->storage_quota, rt->disk_mode):
 * creates, never starts, a probe container with StorageOpt size and
 * removes it again. */
void docker_disk_discover(docker_runtime_t *rt, json_object *info);

/* For a stopped container's details (the caller asks only for one that a
 * SIGKILL ended): true when it carries
 * RUNTIME_LABEL_DISK_MIB (in inspect's Config.Labels) and its writable
 * layer is over that quota. */
bool docker_disk_exceeded(docker_runtime_t *rt, json_object *inspect);

/* The size of container id's writable layer in bytes (SizeRw; inspect
 * ?size=true, bounded to DOCKER_DISK_CALL_MS). */
int docker_container_size_rw(docker_runtime_t *rt, const char *id, int64_t *ret, api_error_t *err);

const char *docker_rt_disk_mode(const runtime_t *base);
int docker_rt_disk_enforce(runtime_t *base, const char *cluster_id, const char *worker_name,
                           runtime_disk_stop_t *ret, size_t max, size_t *ret_n, api_error_t *err);

/* ---- docker_files.c ---------------------------------------------------- */

/* The files_target, files_put and files_get operations of docker_ops
 * (worker/runtime.h: runtime_files_target, runtime_files_put,
 * runtime_files_get): the owned container (its image's size and disk quota
 * for a download's bound), the Engine's archive API. */
int docker_rt_files_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                           int64_t *ret_fs_bytes, api_error_t *err);
int docker_rt_files_put(runtime_t *base, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err);
int docker_rt_files_get(runtime_t *base, const runtime_files_get_req_t *req, api_error_t *err);

#endif
