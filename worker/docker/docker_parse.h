/* The Docker backend's readers of Engine answers: JSON the Engine sent (a
 * container list, an inspect, an exec inspect) into the worker's structs.
 * Pure (no I/O), so tests/fuzz/fuzz_engine_json.c and tests/unit can call
 * them; whatever the Engine says, they never fail the caller's invariants
 * (ids are URL-safe names, texts fit and are one line of valid UTF-8). */
#ifndef SBX_DOCKER_PARSE_H
#define SBX_DOCKER_PARSE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime.h"

/* Names that go into a URL path unescaped: container ids and names
 * (letters, digits, "_-.", shorter than max). */
bool docker_name_ok(const char *s, size_t max);

/* The runtime's error text, made one line of valid UTF-8 that fits out. */
void docker_text_line(const char *s, char *out, size_t outlen);

/* Fills ret from an inspect answer's State (not the output tail). */
void docker_exit_from_inspect(json_object *inspect, runtime_exit_t *ret);

/* The quota a container's labels carry, in MiB; 0 when none (or malformed). */
int64_t docker_disk_label(json_object *labels);

/* A GET /containers/json answer (an array) into a malloc'd array of
 * objects (runtime_inventory_free; never NULL on success): those with a
 * usable sandbox label and id, not another worker's (when worker_name is
 * set), tenant and state checked (else "" and "unknown"). 0, or
 * SBX_EINVAL when list is not an array, SBX_ENOMEM. */
int docker_inventory_parse(json_object *list, const char *worker_name, runtime_object_t **ret, size_t *ret_n);

/* What the worker reads of a GET /exec/{id}/json answer. */
typedef struct docker_exec_state {
    bool running;
    int exit_code;       /* -1 while unknown (or out of range) */
    pid_t pid;           /* 0 when unknown (or out of range) */
    char container[80];  /* the full container id; "" when not a usable name */
} docker_exec_state_t;

/* Fills ret from an exec inspect answer. */
void docker_exec_from_inspect(json_object *o, docker_exec_state_t *ret);

/* Fills ret from the decoded JSON of an archive answer's
 * X-Docker-Container-Path-Stat header ({"name","size","mode","mtime",
 * "linkTarget"}; mode is Go's os.FileMode): the permission bits with
 * setuid/setgid/sticky as 04000/02000/01000, the type from the mode's kind
 * bits, texts cut to fit. false when name, size or mode is missing or out
 * of range. */
bool docker_path_stat_parse(json_object *o, runtime_files_stat_t *ret);

#endif
