/* The external runtime driver backend of the runtime interface
 * (docs/runtime-drivers.md): a driver program, supervised by the worker,
 * runs the sandboxes; this backend speaks protocol 1 with it. What it adds
 * to the promises of worker/runtime.h:
 * - refs are "x:" + the driver's ref;
 * - a class is offered only after its start-up probe (create, exec true,
 *   remove) passed; runtime_probe_result says why not otherwise;
 * - logs are API_UNAVAILABLE (protocol 1 has no logs method); files, shells
 *   and dials are too when the driver lacks the capability ("files",
 *   "shell", "dial"). */
#ifndef SBX_RUNTIME_EXTERNAL_H
#define SBX_RUNTIME_EXTERNAL_H

#include "runtime.h"

typedef struct runtime_external_options {
    const char *command;        /* worker_driver_command: a JSON array of strings */
    const char *worker_name;    /* labels the probe sandboxes; may be NULL */
} runtime_external_options_t;

/* Parses a worker_driver_command value: a JSON array of 1..SBX_DRIVER_ARGV_MAX
 * non-empty strings (each < 4096 bytes, no NUL), the first an absolute path
 * or a bare name. 0 with *ret_argv (NULL-terminated, malloc'd; free each and
 * the array) and *ret_argc, or SBX_EINVAL with why filled. */
int runtime_external_parse_command(const char *value, char ***ret_argv, size_t *ret_argc, char *why, size_t whylen);

/* Makes the run directory (0700), starts the driver, waits for its hello
 * (about 15 s at most) and probes each class it declares (bounded, about a
 * minute each at worst). A driver that does not start is not an error: its
 * classes are not offered and runtime_probe_result says why. Returns 0,
 * SBX_EINVAL for a malformed command (err), SBX_ENOMEM. */
int runtime_external_open(const runtime_external_options_t *opt, runtime_t **ret, api_error_t *err);

#endif
