/* Trust classification: from a sandbox spec and the rules of the server and
 * the tenant to a trust level, a minimum isolation class, the hardening and
 * the reasons, or a denial naming the rule (docs/security.md, "Classification"). Pure logic. */
#ifndef SBX_CLASSIFY_H
#define SBX_CLASSIFY_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "errors.h"
#include "policy.h"
#include "spec.h"

typedef enum { TRUST_TRUSTED = 0, TRUST_UNTRUSTED, TRUST_HOSTILE } trust_t;

/* "trusted" | "untrusted" | "hostile" */
const char *trust_name(trust_t t);

typedef struct classify_rules {
    isolation_t min_class[3];        /* by trust level */
    const char *min_source[3];       /* "server" or "tenant", for the reasons */
    bool untrusted_open_network;     /* untrusted or hostile work may have an open network */
    bool tenants_may_open;           /* the server lets a tenant policy allow that */
} classify_rules_t;

/* The server's rules (from its settings), before any tenant. */
void classify_rules_server(classify_rules_t *r, isolation_t trusted, isolation_t untrusted, isolation_t hostile,
                           bool allow_untrusted_open_network);

/* Applies a tenant policy on top of the server's rules: a tenant may ask
 * for stronger classes; it may allow untrusted open networks only when the
 * server lets tenants do so. Without a tenant opinion, untrusted work gets
 * no open network. */
void classify_rules_tenant(classify_rules_t *r, const policy_t *tenant);

/* Checks a tenant policy against the server's rules: a policy that asks for
 * a weaker class than the server, or for untrusted open networks the server
 * forbids, fills err (API_POLICY_DENIED) and returns SBX_EINVAL. */
int classify_policy_check(const policy_t *tenant, const classify_rules_t *server, api_error_t *err);

#define CLASSIFY_MAX_REASONS 8

typedef struct classification {
    trust_t trust;
    isolation_t isolation;           /* the weakest class the sandbox may run on */
    bool hardened;                   /* no capabilities at all */
    char reasons[CLASSIFY_MAX_REASONS][192];
    size_t nreasons;
} classification_t;

/* Classifies the spec. On a denial fills err (API_POLICY_DENIED, naming
 * the rule) and returns SBX_EINVAL. */
int classify(const sandbox_spec_t *s, const classify_rules_t *r, classification_t *ret, api_error_t *err);

/* {"trust":…, "isolation":…, "hardened":…, "reasons":[…]}. New reference. */
json_object *classification_to_json(const classification_t *c);

#endif
