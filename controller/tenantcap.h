/* Fair shares on one controller (docs/security.md "Fair shares between
 * tenants"): what this process holds open for one tenant at once — file
 * transfers, shells, log streams and connections to workers' forwarders —
 * counted per tenant and capped by the tighter of a server setting
 * (tenant_max_*) and the tenant's policy (max_*), so one tenant cannot take
 * every controller-wide transfer slot or fill a worker's forwarder. Counts
 * are per controller process, like the connection caps and rates. */
#ifndef SBX_TENANTCAP_H
#define SBX_TENANTCAP_H

#include "config.h"
#include "limits.h"
#include "policy.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    TCAP_TRANSFERS = 0,      /* file uploads and downloads, and shells (each a transfer slot) */
    TCAP_SHELLS,             /* interactive shells (sandbox shell, exec -i over the data path) */
    TCAP_LOG_STREAMS,        /* GET /v1/sandboxes/{id}/logs streamed from a worker (followed or not) */
    TCAP_WORKER_CONNS,       /* connections to workers' forwarders: all of the above and routes */
    TCAP__COUNT
} tcap_kind_t;

#define TCAP_BIT(k) (1u << (k))

/* The effective cap of each kind for one tenant: the tighter of the
 * server setting and its policy's field (both > 0). */
typedef struct tenantcap_limits {
    int64_t max[TCAP__COUNT];
} tenantcap_limits_t;

/* What one stream holds: release it once, when the stream ends. */
typedef struct tenantcap_hold {
    char tenant[SBX_ID_MAX];
    unsigned kinds;          /* TCAP_BIT()s held; 0: nothing */
} tenantcap_hold_t;

/* The setting's and the policy field's names of kind k ("tenant_max_shells",
 * "max_shells"), and what it counts ("shells"). */
const char *tenantcap_setting_name(tcap_kind_t k);
const char *tenantcap_policy_name(tcap_kind_t k);
const char *tenantcap_what(tcap_kind_t k);

/* The limits from the settings and a tenant policy (NULL: none). */
void tenantcap_limits(const cfg_t *cfg, const policy_t *p, tenantcap_limits_t *ret);

/* Takes one of each kind in `kinds` for tenant, all or none: 0, or
 * SBX_ETOOBIG when one is at its limit (*ret_over says which). */
int tenantcap_take(tenantcap_hold_t *h, const char *tenant, unsigned kinds, const tenantcap_limits_t *lim,
                   tcap_kind_t *ret_over);
/* Adds kinds to what h already holds (same tenant): as tenantcap_take. */
int tenantcap_add(tenantcap_hold_t *h, unsigned kinds, const tenantcap_limits_t *lim, tcap_kind_t *ret_over);
/* Gives back what h holds; h then holds nothing (a second call is a no-op). */
void tenantcap_release(tenantcap_hold_t *h);

/* What tenant holds of kind k on this controller now. */
int64_t tenantcap_count(const char *tenant, tcap_kind_t k);

/* The refusal's message: "tenant T holds N shells on this controller
 * (tenant_max_shells / policy max_shells = N): ...". */
void tenantcap_message(const tenantcap_limits_t *lim, tcap_kind_t k, char *out, size_t outlen);

#endif
