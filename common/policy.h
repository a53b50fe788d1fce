/* Tenant policy: limits, quotas, image and registry allowlists and network modes, and its
 * strict JSON codec. A tenant's policy only tightens the server's ceilings. */
#ifndef SBX_POLICY_H
#define SBX_POLICY_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress.h"
#include "errors.h"
#include "spec.h"

#define POLICY_MAX_IMAGES 256
#define POLICY_MAX_REGISTRIES 64

typedef struct policy {
    /* 0 means "not set" for every number. */
    int64_t max_cpu_millis, max_memory_mib, max_ttl_seconds, max_disk_mib;
    int64_t max_sandboxes, max_total_cpu_millis, max_total_memory_mib;
    int64_t exec_output_default_bytes, exec_output_max_bytes;
    int64_t max_pool_size;  /* the largest pool this tenant may declare itself; 0: it may declare none */
    /* What one controller holds open for the tenant at once (tighten the
     * tenant_max_* settings; controller/tenantcap.h). */
    int64_t max_transfers, max_shells, max_log_streams, max_worker_connections;
    /* Executors one worker runs for this tenant at once (tightens the
     * worker's worker_tenant_executors_percent); live exec output kept over all its operations
     * (tightens exec_output_tenant_keep_bytes) */
    int64_t max_executors_per_worker, exec_output_tenant_keep_bytes;
    /* Snapshots the tenant keeps, and the MiB they add to their images
     * (tighten max_snapshots and max_snapshot_mib). */
    int64_t max_snapshots, max_snapshot_mib;
    /* Volumes (tighten max_volumes and max_volume_mib). */
    int64_t max_volumes, max_volume_mib;
    char **images;          /* allowlist: exact names or "prefix/" followed by a star; NULL = any */
    size_t n_images;
    bool images_set;
    char **registries;      /* registries images may come from (imageref entries); NULL = the server's */
    size_t n_registries;
    bool registries_set;
    char **egress_allow;    /* CIDRs (canonical, netaddr_cidr_parse) open sandboxes may reach past the
                             * private/link-local block; NULL = none */
    size_t n_egress_allow;
    bool egress_allow_set;
    /* Egress rules by domain for open sandboxes (docs/network.md): a
     * request's rules may only narrow them; not set: a request's own */
    egress_rules_t egress;
    unsigned network_modes; /* bit (1 << net_mode_t) per allowed mode */
    bool network_set;
    int routes;             /* -1 unset, 0 no, 1 yes */
    /* Minimum isolation class per trust level (-1 unset): trusted,
     * untrusted (repository or generated code), hostile. */
    int isolation_min[3];
    int untrusted_open_network; /* -1 unset, 0 no, 1 yes */
    int auto_pause;         /* -1 unset, 0 no, 1 yes: a TTL that passes pauses a sandbox instead of deleting it */
} policy_t;

/* The policy field names of isolation_min[], by trust level. */
extern const char *const policy_isolation_rules[3];

/* An empty policy (nothing set). */
void policy_init(policy_t *p);

/* Decodes {"max_cpu_millis":…, "images":[…], "network_modes":[…],
 * "egress_allow":["10.1.0.0/16", …], "egress":{"allow":[…],"deny":[…],"default":"deny"}, …}.
 * Unknown fields, wrong types and out-of-range numbers fill err
 * (API_INVALID_ARGUMENT, naming the field). */
int policy_from_json(json_object *o, policy_t *ret, api_error_t *err);
/* The set fields only. New reference. */
json_object *policy_to_json(const policy_t *p);
void policy_release(policy_t *p);

/* True when the image matches the allowlist (or there is none). A "prefix/" star pattern
 * matches any name under "prefix/". */
bool policy_image_allowed(const policy_t *p, const char *image);
/* True when the registry (imageref_registry's form) matches an entry of
 * the tenant's registries (or there are none). */
bool policy_registry_allowed(const policy_t *p, const char *registry);
/* True when the network mode is allowed (or no modes are set). */
bool policy_network_allowed(const policy_t *p, net_mode_t m);

/* The tighter of a server ceiling and a tenant limit (0 = unset). */
int64_t policy_tighter(int64_t server, int64_t tenant);

/* One numeric limit: asked against the tighter of the server ceiling and
 * the tenant's policy (0 = unset). Returns 0 when within it, else
 * SBX_EINVAL with err set to policy_denied naming the binding rule:
 * "FIELD ASKED is over the tenant policy RULE = N" or "... the server
 * ceiling RULE = N". */
int policy_check_limit(const char *field, int64_t asked, const char *rule, int64_t server, int64_t tenant,
                       api_error_t *err);

#endif
