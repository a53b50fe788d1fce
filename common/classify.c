/* Trust classification rules. */
#include "classify.h"
#include "jsonx.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *trust_name(trust_t t)
{
    static const char *const names[] = { "trusted", "untrusted", "hostile" };
    return (unsigned)t < 3 ? names[t] : "unknown";
}

void classify_rules_server(classify_rules_t *r, isolation_t trusted, isolation_t untrusted, isolation_t hostile,
                           bool allow_untrusted_open_network)
{
    memset(r, 0, sizeof *r);
    r->min_class[TRUST_TRUSTED] = trusted;
    r->min_class[TRUST_UNTRUSTED] = untrusted;
    r->min_class[TRUST_HOSTILE] = hostile;
    for (int i = 0; i < 3; i++)
        r->min_source[i] = "server";
    /* The server alone never opens the network to untrusted work: a tenant
     * must ask for it (classify_rules_tenant). */
    r->untrusted_open_network = false;
    r->tenants_may_open = allow_untrusted_open_network;
}

void classify_rules_tenant(classify_rules_t *r, const policy_t *tenant)
{
    for (int i = 0; i < 3; i++)
        if (tenant->isolation_min[i] >= 0 && (isolation_t)tenant->isolation_min[i] > r->min_class[i]) {
            r->min_class[i] = (isolation_t)tenant->isolation_min[i];
            r->min_source[i] = "tenant";
        }
    r->untrusted_open_network = r->tenants_may_open && tenant->untrusted_open_network == 1;
}

int classify_policy_check(const policy_t *tenant, const classify_rules_t *server, api_error_t *err)
{
    for (int i = 0; i < 3; i++)
        if (tenant->isolation_min[i] >= 0 && (isolation_t)tenant->isolation_min[i] < server->min_class[i])
            return api_error_set(err, API_POLICY_DENIED,
                                 "a tenant policy can only tighten the server: %s %s is weaker than the server's %s",
                                 policy_isolation_rules[i], isolation_name((isolation_t)tenant->isolation_min[i]),
                                 isolation_name(server->min_class[i]));
    if (tenant->untrusted_open_network == 1 && !server->tenants_may_open)
        return api_error_set(err, API_POLICY_DENIED,
                             "a tenant policy can only tighten the server: untrusted_open_network is forbidden by "
                             "the server setting allow_untrusted_open_network");
    return 0;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void reason(classification_t *c, const char *fmt, ...)
{
    if (c->nreasons >= CLASSIFY_MAX_REASONS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reasons[c->nreasons++], sizeof c->reasons[0], fmt, ap);
    va_end(ap);
}

int classify(const sandbox_spec_t *s, const classify_rules_t *r, classification_t *ret, api_error_t *err)
{
    classification_t c;
    memset(&c, 0, sizeof c);
    memset(ret, 0, sizeof *ret);

    /* Trust level: the strongest flag wins. */
    if (s->hostile) {
        c.trust = TRUST_HOSTILE;
        reason(&c, "hostile: the request marks the code hostile");
    } else if (s->untrusted_repo || s->generated_code) {
        c.trust = TRUST_UNTRUSTED;
        reason(&c, "untrusted: %s%s%s", s->untrusted_repo ? "untrusted repository" : "",
               s->untrusted_repo && s->generated_code ? " and " : "", s->generated_code ? "generated code" : "");
    } else {
        c.trust = TRUST_TRUSTED;
        reason(&c, "trusted: no trust flags set");
    }

    /* Network: untrusted work gets no open network unless the tenant allows
     * it, and never together with environment values (possible secrets). */
    if (c.trust != TRUST_TRUSTED && s->network == NET_OPEN) {
        if (!r->untrusted_open_network)
            return api_error_set(err, API_POLICY_DENIED,
                                 "network open is not allowed for %s work (rule untrusted_open_network: %s); use "
                                 "network restricted or none%s",
                                 trust_name(c.trust),
                                 r->tenants_may_open ? "the tenant policy does not allow it"
                                                                       : "the server forbids it",
                                 r->tenants_may_open ? ", or set untrusted_open_network in the tenant policy"
                                     : "");
        if (s->env.n > 0)
            return api_error_set(err, API_POLICY_DENIED,
                                 "%s work with an open network gets no environment values, which may hold secrets "
                                 "(rule untrusted_secrets_open_network); drop env or the open network",
                                 trust_name(c.trust));
        reason(&c, "network open allowed for %s work by the tenant policy (untrusted_open_network)",
               trust_name(c.trust));
    }

    /* Isolation: the rule for the trust level, raised by the request. */
    c.isolation = r->min_class[c.trust];
    reason(&c, "needs at least %s (%s rule isolation_%s)", isolation_name(c.isolation), r->min_source[c.trust],
           trust_name(c.trust));
    if (s->has_isolation && s->isolation > c.isolation) {
        c.isolation = s->isolation;
        reason(&c, "the request asks for at least %s", isolation_name(c.isolation));
    } else if (s->has_isolation && s->isolation < c.isolation) {
        reason(&c, "the request accepts %s, but the rule requires %s", isolation_name(s->isolation),
               isolation_name(c.isolation));
    }

    /* Hardening: untrusted and hostile work keeps no capabilities. */
    c.hardened = s->hardened || c.trust != TRUST_TRUSTED;
    if (c.trust != TRUST_TRUSTED)
        reason(&c, "hardened: %s work runs with no capabilities", trust_name(c.trust));
    else if (s->hardened)
        reason(&c, "hardened: the request asks for no capabilities");
    if (s->read_only_root)
        reason(&c, "read-only root filesystem with a tmpfs /tmp, as requested");

    *ret = c;
    return 0;
}

json_object *classification_to_json(const classification_t *c)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "trust", trust_name(c->trust));
    jsonx_add_str(o, "isolation", isolation_name(c->isolation));
    jsonx_add_bool(o, "hardened", c->hardened);
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < c->nreasons; i++)
        json_object_array_add(a, json_object_new_string(c->reasons[i]));
    jsonx_add(o, "reasons", a);
    return o;
}
