/* What the files of the external backend share: its runtime struct and the
 * operations that move bytes over driver streams (external_io.c). */
#ifndef SBX_EXTERNAL_INTERNAL_H
#define SBX_EXTERNAL_INTERNAL_H

#include "extdrv.h"
#include "runtime_external.h"

#define EXT_CLASSES 3

typedef struct ext_runtime {
    runtime_t base;
    extdrv_t *drv;
    char rundir[256];
    int lock_fd;              /* flock held on rundir's lock while the worker lives */
    char worker_name[128];
    extdrv_hello_t hello;
    bool considered[EXT_CLASSES];
    bool offered[EXT_CLASSES];
    unsigned net_modes[EXT_CLASSES];
    char probe[EXT_CLASSES][RUNTIME_PROBE_TEXT_MAX];
    char net_why[RUNTIME_PROBE_TEXT_MAX];
    const atomic_int *cancel;
} ext_runtime_t;

/* The driver's ref inside an "x:" ref, or NULL when ref is not this backend's. */
const char *ext_driver_ref(const char *ref);

/* A fresh stream token (EXTDRV_TOKEN_LEN hex characters + NUL). */
void ext_stream_token(char ret[EXTDRV_TOKEN_LEN + 1]);

/* Connects to the driver's streams.sock and sends the token line: 0 with
 * *ret_fd (blocking, close-on-exec), or API_RUNTIME_ERROR. */
int ext_stream_connect(ext_runtime_t *rt, const char *token, int *ret_fd, api_error_t *err);

/* dial of driver ref dref (checked by the caller): the connected stream in *ret_fd (nonblocking). */
int ext_dial(ext_runtime_t *rt, const char *dref, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err);

/* A raw upload: what read gives (RUNTIME_FILES_REFUSED from it: refused),
 * at most max_bytes, until a stop descriptor is readable. */
typedef struct ext_upload {
    runtime_files_read_fn read;
    void *ud;
    int64_t max_bytes;
    const int *stop_fds;
    size_t nstop_fds;
} ext_upload_t;

/* Calls method with params p (taken; its "stream" token is drawn here) and
 * sends up's bytes on the call's raw stream, half-closed at their end (a
 * failure resets it). 0 with *ret_res the driver's answer (put it) and
 * *ret_total the bytes sent, or < 0 with err. */
int ext_upload(ext_runtime_t *rt, const char *method, json_object *p, const ext_upload_t *up, int64_t *ret_total,
               json_object **ret_res, api_error_t *err);

/* A raw download: on_answer sees the driver's answer first (0 go on, 1 stop
 * quietly, < 0 an error it set); on_data each piece of the stream after it
 * (< 0 stops, not an error); a stop descriptor readable stops too. */
typedef struct ext_download {
    int (*on_answer)(void *ud, json_object *res, api_error_t *err);
    int (*on_data)(void *ud, const char *data, size_t n);
    void *ud;
    const int *stop_fds;
    size_t nstop_fds;
} ext_download_t;

/* Calls method with params p (taken; its "stream" drawn here) and reads its
 * raw stream to its end into dl. 0, or < 0 with err. */
int ext_download(ext_runtime_t *rt, const char *method, json_object *p, const ext_download_t *dl, api_error_t *err);

int ext_rt_exec(runtime_t *base, const char *ref, const exec_spec_t *spec, size_t max_output,
                const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err);
int ext_rt_files_put(runtime_t *base, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err);
int ext_rt_files_get(runtime_t *base, const runtime_files_get_req_t *req, api_error_t *err);

int ext_rt_shell_open(runtime_t *base, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                      runtime_shell_early_t *ret_early, api_error_t *err);
int ext_rt_shell_resize(runtime_t *base, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err);
int ext_rt_shell_exit_code(runtime_t *base, runtime_shell_t *s, int *ret_code, api_error_t *err);
void ext_rt_shell_close(runtime_t *base, runtime_shell_t *s);

#endif
