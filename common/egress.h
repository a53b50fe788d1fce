/* Egress rules by name (issue 33, docs/security.md): which domains a
 * sandbox's outbound connections and DNS queries may name. Pure: parsing,
 * canonical form, matching and the tightening of a request by its tenant's
 * policy; the worker's filter enforces them. */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* A DNS name at most (RFC 1035), and the entries of one list at most. */
#define EGRESS_DOMAIN_MAX  253
#define EGRESS_ENTRIES_MAX 256
/* UDP destination ports one rule set may allow, at most. */
#define EGRESS_UDP_MAX     16

/* Domains allowed and denied, each canonical: lowercase, no final dot,
 * "example.com" (that name only) or "*.example.com" (every name below it,
 * not example.com itself); what matches neither is allowed only when
 * default_allow. A deny wins over an allow. UDP other than DNS goes out
 * only to the ports in udp, and only to an address the filter's resolver
 * gave for a name the rules allow (QUIC: 443). */
typedef struct egress_rules {
    char **allow, **deny;
    size_t n_allow, n_deny;
    uint16_t udp[EGRESS_UDP_MAX];  /* ascending, each once */
    size_t n_udp;
    bool default_allow;
    bool set;              /* given at all (an absent rule set constrains nothing) */
} egress_rules_t;

void egress_rules_release(egress_rules_t *r);

/* Canonical form of a rule's domain into out: 0, or SBX_EINVAL with why
 * (an IP address, a bad label, too long, a wildcard not as the whole first
 * label). */
int egress_domain_canon(const char *in, char out[EGRESS_DOMAIN_MAX + 1], char *why, size_t whylen);

/* {"allow":[…],"deny":[…],"default":"deny"|"allow","udp":[PORT…]} into
 * *ret; null or absent: not set. A bad entry is SBX_EINVAL with err naming
 * it as what.allow[N] (what: "policy.egress", "egress"). Without default:
 * "allow" when the rules only deny (all but those), else "deny". */
int egress_rules_from_json(json_object *o, const char *what, egress_rules_t *ret, api_error_t *err);
/* The canonical JSON (a new object; "udp" only when it lists a port), or
 * NULL when r is not set. */
json_object *egress_rules_to_json(const egress_rules_t *r);

/* Whether name (a host as a client named it: any case, maybe a final
 * dot) may be reached under r; *ret_rule (may be NULL) gets the rule that
 * decided ("deny *.x.com", "allow x.com", "default") in a static or r-owned
 * string. A name that is not a valid DNS name is denied. An unset r allows. */
bool egress_allowed(const egress_rules_t *r, const char *name, const char **ret_rule);
/* Whether r lets UDP go to port (an unset r: no; DNS is not asked here). */
bool egress_udp_allowed(const egress_rules_t *r, unsigned port);

/* What a request may have within its tenant's rules: every domain the
 * request allows must be allowed by the tenant (a wildcard: all of it), its
 * default may be allow only if the tenant's is; the tenant's denies are
 * kept; every UDP port it allows must be the tenant's too. *ret: the
 * request's rules with those denies (the tenant's when the request sets
 * none). SBX_EINVAL with err naming the request's entry (what.allow[N],
 * what.udp[N]) the tenant does not allow. */
int egress_rules_within(const egress_rules_t *tenant, const egress_rules_t *req, const char *what,
                        egress_rules_t *ret, api_error_t *err);

#endif
