/* The typed sandbox spec and exec request, and their strict JSON codecs. */
#ifndef SBX_SPEC_H
#define SBX_SPEC_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress.h"
#include "errors.h"

typedef enum { NET_NONE = 0, NET_RESTRICTED, NET_OPEN } net_mode_t;

/* "none" | "restricted" | "open" */
const char *net_mode_name(net_mode_t m);
int net_mode_parse(const char *s, net_mode_t *ret);
/* What a worker offers per class (its register body's "networks"), bit
 * (1 << i) each: net_mode_t's modes and "filtered", open through the
 * worker's egress filter that enforces a sandbox's egress rules by domain
 * (docs/network.md); a sandbox with egress rules needs it. */
#define NET_OFFER_FILTERED 3
#define NET_OFFERS         4
const char *net_offer_name(int i);
int net_offer_parse(const char *s, int *ret);

typedef enum { ISO_CONTAINER = 0, ISO_GVISOR, ISO_MICROVM } isolation_t;
/* "container" | "gvisor" | "microvm"; ordered weakest to strongest. */
const char *isolation_name(isolation_t c);
int isolation_parse(const char *s, isolation_t *ret);

typedef struct kv {
    char *key;
    char *value;
} kv_t;

typedef struct kv_list {
    kv_t *items;
    size_t n;
} kv_list_t;

/* Defaults applied when a field is absent. */
#define SPEC_DEFAULT_CPU_MILLIS   1000
#define SPEC_DEFAULT_MEMORY_MIB   512
#define SPEC_DEFAULT_TTL_SECONDS  3600
#define EXEC_DEFAULT_TIMEOUT      600

/* A volume a sandbox mounts (create's "volumes"): the client names it by
 * id or name; the controller stores its id and its size. */
#define SPEC_VOLUMES_MAX 8
#define SPEC_SECRETS_MAX 8
#define SPEC_VOLUME_PATH_MAX 256
typedef struct spec_volume {
    char *volume;        /* vol_... once admitted (a name before) */
    char *path;          /* absolute, normalized, where it appears */
    bool read_only;
    int64_t size_mib;    /* set by the controller (0 from a client) */
} spec_volume_t;

typedef struct sandbox_spec {
    char *tenant;          /* NULL when the request named none */
    char *image;
    int64_t cpu_millis;
    int64_t memory_mib;
    int64_t disk_mib;      /* disk quota of the writable layer (and tmpfs); 0: absent (the server default) */
    int64_t ttl_seconds;
    net_mode_t network;
    bool untrusted_repo;
    bool generated_code;
    bool hostile;
    /* The weakest isolation class the client accepts (the policy may ask
     * for a stronger one); has_isolation false when the request named none. */
    bool has_isolation;
    isolation_t isolation;
    bool read_only_root;   /* root filesystem read-only, a tmpfs on /tmp */
    bool hardened;         /* no capabilities at all (set by policy for untrusted work) */
    kv_list_t env;
    kv_list_t labels;
    kv_list_t selector;    /* worker labels that must all match */
    /* The snapshot the sandbox starts from (its files instead of the
     * image's): a client names it by id or name; the controller stores the
     * id. NULL: the image alone. */
    char *from;
    /* When its TTL passes: paused (container, gvisor) instead of deleted
     * (docs/pause.md); absent from the canonical JSON when false. */
    bool auto_pause;
    /* The volumes it mounts (docs/volumes.md); absent from the canonical
     * JSON when none. */
    spec_volume_t volumes[SPEC_VOLUMES_MAX];
    size_t nvolumes;
    /* Egress rules by domain for an open sandbox (docs/network.md):
     * the request's, then (the controller) the tighter of them and the
     * tenant's; absent from the canonical JSON when not set. */
    egress_rules_t egress;
    /* The tenant's secrets its requests carry at egress (names; docs/
     * network.md#secrets-at-egress): the worker's filter adds each one's
     * header for its hosts. Needs egress rules. Absent when none. */
    char *secrets[SPEC_SECRETS_MAX];
    size_t nsecrets;
} sandbox_spec_t;

typedef struct exec_spec {
    char **argv;           /* argc strings, NULL-terminated */
    size_t argc;
    kv_list_t env;
    char *cwd;             /* NULL: the image's working directory */
    char *user;            /* NULL: the image's user; else name[:group] (container, gvisor) */
    int64_t timeout_seconds;
    int64_t max_output_bytes; /* 0: the server default */
    /* The command's stdin (stdin_len bytes, any bytes, NUL-terminated for
     * convenience); has_stdin false: the command's stdin is empty and
     * closed, as it is without a request field. */
    bool has_stdin;
    char *stdin_data;
    size_t stdin_len;
} exec_spec_t;

/* Decodes a create request. Unknown fields, wrong types, out-of-range
 * numbers and missing required fields fill err (API_INVALID_ARGUMENT, the
 * message names the field) and return SBX_EINVAL; on success *ret owns its
 * strings (spec_release). The image is required. */
int spec_from_json(json_object *o, sandbox_spec_t *ret, api_error_t *err);
/* As spec_from_json, but a request without "image" (absent or null) gets
 * default_image (copied; NULL: the image is required). */
int spec_from_json_default(json_object *o, const char *default_image, sandbox_spec_t *ret, api_error_t *err);

/* A sandbox's name (create's "name"; usable wherever its id is): 1 to
 * SBX_SANDBOX_NAME_MAX letters, digits, '_', '.' or '-', starting with a
 * letter or digit, and not starting "sbx_" (ids and names never meet). */
#define SBX_SANDBOX_NAME_MAX 63
bool spec_sandbox_name_ok(const char *s);

/* A snapshot's name (unique among a tenant's snapshots; usable wherever
 * its id is): the rule of a sandbox's name, and not starting "snp_". */
#define SBX_SNAPSHOT_NAME_MAX 63
bool spec_snapshot_name_ok(const char *s);
/* A volume's name (unique among a tenant's live volumes): the rule of a
 * sandbox's name, and not starting "vol_". */
bool spec_volume_name_ok(const char *s);
/* A secret's name: the rule of a sandbox's name. */
bool spec_secret_name_ok(const char *s);
/* A volume reference: its id (vol_ and 26 base32 characters) or a name. */
bool spec_volume_ref_ok(const char *s);
/* Where a volume may appear in a sandbox: an absolute path of at most
 * SPEC_VOLUME_PATH_MAX bytes, no empty, "." or ".." component, no trailing
 * slash, not "/" and not under /proc, /sys or /dev; why gets the reason. */
bool spec_volume_path_ok(const char *s, char *why, size_t whylen);
/* A snapshot reference: its id (snp_ and 26 base32 characters) or a name. */
bool spec_snapshot_ref_ok(const char *s);

/* The defaults a template version sets for the sandboxes made from it (a
 * snapshot request's "config"): {"env":{K:V}, "workdir":"/abs",
 * "user":"name[:group]", "cmd":[…], "entrypoint":[…], "expose":[ports]},
 * every field optional. Checks it (unknown fields, types and bounds are
 * API_INVALID_ARGUMENT naming the field) and returns its canonical form
 * (new reference; NULL o: an empty object). */
#define SPEC_CONFIG_ARGV_MAX   64
#define SPEC_CONFIG_EXPOSE_MAX 32
#define SPEC_CONFIG_ARG_BYTES  4096
int spec_snapshot_config_from_json(json_object *o, json_object **ret, api_error_t *err);

/* The local image name a worker keeps a snapshot under (a tag of the
 * reserved repository SPEC_SNAPSHOT_REPO), written into out. A create's
 * image may never name that repository: only "from" reaches a snapshot. */
#define SPEC_SNAPSHOT_REPO "sandbox-snapshot"
void spec_snapshot_image(const char *snapshot_id, char *out, size_t outlen);
/* True when image names the reserved snapshot repository (with or without
 * a registry or tag). */
bool spec_image_is_snapshot(const char *image);

/* True when s is an image reference: [DOMAIN[:PORT]/]NAME[/NAME...][:TAG][@ALGO:HEX],
 * names lowercase [a-z0-9] separated by . _ -, at most SBX_MAX_IMAGE_BYTES.
 * On false, why (if not NULL) gets a one-line reason. */
bool spec_image_ref_valid(const char *s, char *why, size_t whylen);
/* The canonical JSON of a spec (every field present, but disk_mib only
 * when set). New reference. */
json_object *spec_to_json(const sandbox_spec_t *s);
void spec_release(sandbox_spec_t *s);

/* Decodes an exec request (argv required, non-empty). Same error rules.
 * stdin comes as "stdin" (a string, its bytes as given) or "stdin_b64"
 * (standard base64), never both, at most SBX_EXEC_STDIN_INLINE_MAX bytes. */
int exec_spec_from_json(json_object *o, exec_spec_t *ret, api_error_t *err);
/* The canonical JSON of an exec request: stdin, when there is any, always
 * as "stdin_b64" (so a request hashes the same whichever form it used). */
json_object *exec_spec_to_json(const exec_spec_t *s);
void exec_spec_release(exec_spec_t *s);

/* Decodes an extend request {"ttl_seconds": N}: an object with that one
 * field, an integer from SBX_EXTEND_TTL_SECONDS_MIN to SBX_TTL_SECONDS_MAX
 * (the ceilings are the caller's). Returns 0 with *ret_ttl_seconds, or
 * SBX_EINVAL with err (invalid_argument naming the field). */
int spec_extend_from_json(json_object *o, int64_t *ret_ttl_seconds, api_error_t *err);

/* Whether the n bytes at s are a working directory a command may be given:
 * absolute, 1..SBX_MAX_PATH_BYTES, UTF-8, no NUL or other control byte. */
bool spec_cwd_ok(const char *s, size_t n);

/* kv lists as JSON objects {"K":"V",...}; kv_list_from_json validates keys
 * with the given rule ("env" keys are shell identifiers, "label" keys are
 * [A-Za-z0-9._/-]). */
int kv_list_from_json(json_object *o, const char *field, bool env_keys, size_t max,
                      kv_list_t *ret, api_error_t *err);
json_object *kv_list_to_json(const kv_list_t *l);
void kv_list_release(kv_list_t *l);

#endif
