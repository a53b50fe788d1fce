/* sandbox-vmm, the reference microVM driver (docs/runtime-drivers.md, protocol 1,
 * over worker/vmm's vmm.h). vmmdrv_rpc.c: the control channel (newline JSON-RPC
 * on stdin/stdout, one thread per request) and the stream socket;
 * vmmdrv_vm.c: create, inspect, inventory, remove and each VM's connection;
 * vmmdrv_io.c: exec, files, shell, dial. */
#ifndef SBX_VMMDRV_H
#define SBX_VMMDRV_H

#include <json-c/json.h>
#include <pthread.h>
#include <stddef.h>

#include "version.h"
#include "vmm.h"

/* The project's version (meson.build), as every other binary reports. */
#define VMMDRV_VERSION SBX_VERSION
#define VMMDRV_MSG_MAX 400

/* A method's failure: data.code (an API error code) and the message. */
typedef struct {
    const char *code;
    char msg[VMMDRV_MSG_MAX];
    /* run after the response went out (files_get's body); NULL: none */
    void (*after)(void *arg);
    void *after_arg;
} vmmdrv_call_t;

/* One VM's connection, shared by the threads that use it (refs); mu
 * serialises every vmm_* call on it (the library is not thread-safe per VM). */
typedef struct vmmdrv_vm {
    char id[VMM_ID_MAX];
    pthread_mutex_t mu;
    vmm_t *vm;               /* NULL: not attached yet (or the channel broke) */
    int refs;
    int dead;                /* removed: freed by the last release */
    struct vmmdrv_vm *next;
} vmmdrv_vm_t;

typedef struct {
    vmm_config_t cfg;
    char state_dir[VMM_PATH_MAX];
    char agent[VMM_PATH_MAX];
    char rundir[VMM_PATH_MAX];
    const char *docker_sock;     /* NULL: /var/run/docker.sock */
    const char *default_image;   /* the probe's image (create with image "") */
    char probe[VMM_WHY_MAX + 128];/* hello's probe text */
    pthread_mutex_t mu;          /* vms list, images cache */
    pthread_mutex_t build_mu;    /* image bases and templates: one at a time */
    vmmdrv_vm_t *vms;
} vmmdrv_t;

/* ---- vmmdrv_rpc.c ---- */

/* Sets an error on call (code, printf message); returns NULL for `return vmmdrv_fail(...)`. */
json_object *vmmdrv_fail(vmmdrv_call_t *call, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Serves the stream socket $SBX_DRIVER_RUNDIR/streams.sock and reads requests
 * from stdin until its end or shutdown. Returns the exit status. */
int vmmdrv_serve(vmmdrv_t *d);

/* Waits up to 10 s for the stream connection with token tok; returns its fd
 * (the caller closes it) or -1 (call's error set). */
int vmmdrv_stream_take(const char *tok, vmmdrv_call_t *call);

/* Writes all n bytes to fd (a socket or a pipe; SIGPIPE is ignored from
 * the start): 0, or -1 when the peer is gone or a write fails. */
int vmmdrv_write_all(int fd, const void *p, size_t n);

/* Sends one 5-byte-header frame on a stream. 0 or -1. */
int vmmdrv_frame_send(int fd, int type, const void *p, size_t n);

/* Reads one frame (payload up to 16384 into buf). Returns 1 with *type and *n, 0
 * at the stream's end, -1 on an error or a bad frame. */
int vmmdrv_frame_recv(int fd, int *type, unsigned char *buf, size_t *n);

/* A running exec by stream token, for cancel. */
void vmmdrv_exec_register(const char *tok, volatile int *cancel_flag);
void vmmdrv_exec_unregister(const char *tok);
int vmmdrv_exec_cancel(const char *tok);

/* ---- vmmdrv_vm.c ---- */

/* Destroys VMs in the state dir's vms directory that no sandbox record claims (a create cut
 * short by a crash). */
void vmmdrv_vm_sweep(vmmdrv_t *d);

/* Takes a reference on the VM of ref and locks it, attached. NULL with call's
 * error when there is no such sandbox or it does not run. */
vmmdrv_vm_t *vmmdrv_vm_get(vmmdrv_t *d, const char *ref, vmmdrv_call_t *call);
/* Unlocks and drops the reference (broken: the channel failed, detach it). */
void vmmdrv_vm_put(vmmdrv_t *d, vmmdrv_vm_t *v, int broken);

/* The sandbox's env ("K=V" strings, malloc'd array of malloc'd strings) kept at create. */
char **vmmdrv_vm_env(vmmdrv_t *d, const char *ref, size_t *ret_n, char *ret_workdir, size_t wdcap);
void vmmdrv_strv_free(char **v, size_t n);

json_object *vmmdrv_m_create(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_remove(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
/* pause / resume: the VM's QEMU frozen or thawed ({"memory": true}). */
json_object *vmmdrv_m_pause(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_resume(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_inspect(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_inventory(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_images(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);

/* The string at key in object rec, or "" (not there, not a string, rec NULL). */
const char *vmmdrv_str(json_object *rec, const char *key);
/* The JSON object in file path (at most max bytes read; not following a
 * final link), or NULL. */
json_object *vmmdrv_json_read(const char *path, size_t max);
/* Runs argv (NULL-terminated) in the guest as root in /, with a plain PATH,
 * output kept to 512 bytes and dropped: 0 with *ret, or as vmm_exec. */
int vmmdrv_guest_run(vmm_t *vm, const char *const *argv, long timeout_ms, vmm_exec_result_t *ret, char *why);

/* The record of sandbox ref (a new reference: put it), or NULL. */
json_object *vmmdrv_vm_record(vmmdrv_t *d, const char *ref);
/* 1 when a sandbox here was made from snapshot id. */
int vmmdrv_vm_uses_snapshot(vmmdrv_t *d, const char *id);

/* ---- vmmdrv_snap.c ---- */

/* snapshot {ref, snapshot_id, tenant, labels} → {id, tenant, labels,
 * size_bytes, image_bytes, memory}; snapshots → {snapshots: [that]};
 * snapshot_remove {snapshot_id} (conflict while a sandbox runs from it). */
json_object *vmmdrv_m_snapshot(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_snapshots(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_snapshot_remove(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
/* snapshot_export {snapshot_id, stream} → {}, then the raw stream: a
 * tar of the snapshot's files (meta.json, disk.qcow2; with memory also
 * machine.json, append, state.mig). snapshot_import {snapshot_id, tenant,
 * labels, stream}: such a tar, another worker's, checked (that snapshot of
 * that tenant and installation, a standalone disk of its size, a saved
 * machine as vmm_state_save writes one) and kept as this worker's (its
 * labels) → the snapshot's measure. */
json_object *vmmdrv_m_snapshot_export(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_snapshot_import(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
/* The disk of tenant's snapshot id (a VM's backing file), the disk size
 * it was made with and whether it saved the VM's memory too (its directory
 * then restores as vmm_boot's template_dir); -1 with call's error when
 * there is none. */
int vmmdrv_snapshot_disk(vmmdrv_t *d, const char *id, const char *tenant, char *ret_path, size_t cap,
                         uint64_t *ret_disk_bytes, int *ret_memory, vmmdrv_call_t *call);

/* ---- vmmdrv_io.c ---- */

json_object *vmmdrv_m_exec(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_files_put(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_files_get(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_shell_open(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);
json_object *vmmdrv_m_dial(vmmdrv_t *d, json_object *p, vmmdrv_call_t *call);

#endif
