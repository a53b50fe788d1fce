/* Egress rules by name (egress.h). */
#include "egress.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"

void egress_rules_release(egress_rules_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_allow; i++)
        free(r->allow[i]);
    for (size_t i = 0; i < r->n_deny; i++)
        free(r->deny[i]);
    free(r->allow);
    free(r->deny);
    memset(r, 0, sizeof *r);
}

static int why_set(char *why, size_t whylen, const char *text)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", text);
    return SBX_EINVAL;
}

/* A DNS name's labels: 1..63 of [a-z0-9-], no '-' first or last; the last
 * not all digits (an IPv4 address is not a name). p is lowercase. */
static int name_ok(const char *p, char *why, size_t whylen)
{
    size_t n = strlen(p);
    if (n == 0 || n > EGRESS_DOMAIN_MAX)
        return why_set(why, whylen, "a name is 1 to 253 characters");
    const char *label = p;
    bool digits_only = true;
    for (size_t i = 0; i <= n; i++) {
        char c = p[i];
        if (c == '.' || c == '\0') {
            size_t l = (size_t)(p + i - label);
            if (l == 0 || l > 63)
                return why_set(why, whylen, "each label (between dots) is 1 to 63 characters");
            if (label[0] == '-' || label[l - 1] == '-')
                return why_set(why, whylen, "a label neither starts nor ends with '-'");
            if (c == '\0' && digits_only)
                return why_set(why, whylen, "an IP address is not a domain (list CIDRs in egress_allow)");
            label = p + i + 1;
            digits_only = true;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return why_set(why, whylen, "a name holds letters, digits, '-' and dots only");
        if (!(c >= '0' && c <= '9'))
            digits_only = false;
    }
    return 0;
}

int egress_domain_canon(const char *in, char out[EGRESS_DOMAIN_MAX + 1], char *why, size_t whylen)
{
    size_t n = in ? strlen(in) : 0;
    if (n > 0 && in[n - 1] == '.')
        n--; /* the root's dot */
    if (n == 0 || n > EGRESS_DOMAIN_MAX)
        return why_set(why, whylen, "a domain is 1 to 253 characters");
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[n] = '\0';
    const char *name = out;
    if (strncmp(out, "*.", 2) == 0)
        name = out + 2;
    else if (strchr(out, '*'))
        return why_set(why, whylen, "a wildcard is '*.' before a domain, as the whole first label");
    return name_ok(name, why, whylen);
}

/* Whether name ends with the ".domain" of wildcard "*.domain" and has
 * more before it. */
static bool ends_below(const char *name, const char *wildcard)
{
    const char *suffix = strchr(wildcard, '.'); /* the wildcard's ".domain" */
    size_t sl = suffix ? strlen(suffix) : 0, nl = strlen(name);
    return suffix && nl > sl && strcmp(name + (nl - sl), suffix) == 0;
}

/* Whether canonical rule matches canonical name. */
static bool rule_matches(const char *rule, const char *name)
{
    if (strncmp(rule, "*.", 2) != 0)
        return strcmp(rule, name) == 0;
    return ends_below(name, rule);
}

bool egress_allowed(const egress_rules_t *r, const char *name, const char **ret_rule)
{
    char canon[EGRESS_DOMAIN_MAX + 1];
    if (ret_rule)
        *ret_rule = "default";
    if (!r || !r->set)
        return true;
    if (egress_domain_canon(name, canon, NULL, 0) < 0 || canon[0] == '*') {
        if (ret_rule)
            *ret_rule = "not a domain name";
        return false;
    }
    for (size_t i = 0; i < r->n_deny; i++)
        if (rule_matches(r->deny[i], canon)) {
            if (ret_rule)
                *ret_rule = r->deny[i];
            return false;
        }
    for (size_t i = 0; i < r->n_allow; i++)
        if (rule_matches(r->allow[i], canon)) {
            if (ret_rule)
                *ret_rule = r->allow[i];
            return true;
        }
    return r->default_allow;
}

/* Adds canonical d to list unless it is there. 0 or SBX_ENOMEM. */
static int list_add(char ***list, size_t *n, const char *d)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i], d) == 0)
            return 0;
    char **nl = realloc(*list, (*n + 1) * sizeof *nl);
    if (!nl)
        return SBX_ENOMEM;
    *list = nl;
    if (!(nl[*n] = strdup(d)))
        return SBX_ENOMEM;
    (*n)++;
    return 0;
}

static int list_from_json(json_object *o, const char *what, const char *key, char ***list, size_t *n,
                          api_error_t *err)
{
    json_object *a = NULL;
    if (!json_object_object_get_ex(o, key, &a) || json_object_is_type(a, json_type_null))
        return 0;
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) > EGRESS_ENTRIES_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s must be an array of at most %d domains", what, key,
                             EGRESS_ENTRIES_MAX);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        char canon[EGRESS_DOMAIN_MAX + 1], why[128];
        const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
        if (!s)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s[%zu] must be a domain (a string)", what, key, i);
        if (egress_domain_canon(s, canon, why, sizeof why) < 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s[%zu] (%.80s%s): %s", what, key, i, s,
                                 strlen(s) > 80 ? "…" : "", why);
        if (list_add(list, n, canon) < 0)
            return api_error_set(err, API_INTERNAL, "out of memory");
    }
    return 0;
}

/* Adds port to r's ascending udp list unless it is there; false when full. */
static bool udp_add(egress_rules_t *r, uint16_t port)
{
    size_t at = 0;
    while (at < r->n_udp && r->udp[at] < port)
        at++;
    if (at < r->n_udp && r->udp[at] == port)
        return true;
    if (r->n_udp == EGRESS_UDP_MAX)
        return false;
    memmove(r->udp + at + 1, r->udp + at, (r->n_udp - at) * sizeof r->udp[0]);
    r->udp[at] = port;
    r->n_udp++;
    return true;
}

static int udp_from_json(json_object *o, const char *what, egress_rules_t *r, api_error_t *err)
{
    json_object *a = NULL;
    if (!json_object_object_get_ex(o, "udp", &a) || json_object_is_type(a, json_type_null))
        return 0;
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) > EGRESS_UDP_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.udp must be an array of at most %d ports", what,
                             EGRESS_UDP_MAX);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        int64_t port = json_object_is_type(e, json_type_int) ? json_object_get_int64(e) : 0;
        if (port < 1 || port > 65535 || port == 53)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.udp[%zu] must be a port from 1 to 65535 other than "
                                 "53 (DNS goes to the worker's resolver)", what, i);
        udp_add(r, (uint16_t)port);
    }
    return 0;
}

bool egress_udp_allowed(const egress_rules_t *r, unsigned port)
{
    for (size_t i = 0; r && r->set && i < r->n_udp; i++)
        if (r->udp[i] == port)
            return true;
    return false;
}

int egress_rules_from_json(json_object *o, const char *what, egress_rules_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    if (!o || json_object_is_type(o, json_type_null))
        return 0;
    if (!json_object_is_type(o, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an object {allow, deny, default}", what);
    json_object_object_foreach(o, k, v) {
        (void)v;
        if (strcmp(k, "allow") != 0 && strcmp(k, "deny") != 0 && strcmp(k, "default") != 0 && strcmp(k, "udp") != 0)
            return api_error_set(err, API_INVALID_ARGUMENT, "unknown field %s.%.64s (allow, deny, default, udp)", what,
                                 k);
    }
    ret->set = true;
    const char *def = jsonx_get_str(o, "default");
    json_object *dv = NULL;
    if (json_object_object_get_ex(o, "default", &dv) && !json_object_is_type(dv, json_type_null) &&
        (!def || (strcmp(def, "deny") != 0 && strcmp(def, "allow") != 0))) {
        egress_rules_release(ret);
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.default is \"deny\" or \"allow\"", what);
    }
    if (list_from_json(o, what, "allow", &ret->allow, &ret->n_allow, err) < 0 ||
        list_from_json(o, what, "deny", &ret->deny, &ret->n_deny, err) < 0 || udp_from_json(o, what, ret, err) < 0) {
        egress_rules_release(ret);
        return SBX_EINVAL;
    }
    /* no default: rules that only deny mean "all but these", else deny */
    ret->default_allow = def ? strcmp(def, "allow") == 0 : ret->n_allow == 0 && ret->n_deny > 0;
    return 0;
}

json_object *egress_rules_to_json(const egress_rules_t *r)
{
    if (!r || !r->set)
        return NULL;
    json_object *o = json_object_new_object(), *a = json_object_new_array(), *d = json_object_new_array();
    for (size_t i = 0; i < r->n_allow; i++)
        json_object_array_add(a, json_object_new_string(r->allow[i]));
    for (size_t i = 0; i < r->n_deny; i++)
        json_object_array_add(d, json_object_new_string(r->deny[i]));
    jsonx_add(o, "allow", a);
    jsonx_add(o, "deny", d);
    jsonx_add_str(o, "default", r->default_allow ? "allow" : "deny");
    if (r->n_udp) {
        json_object *u = json_object_new_array();
        for (size_t i = 0; i < r->n_udp; i++)
            json_object_array_add(u, json_object_new_int(r->udp[i]));
        jsonx_add(o, "udp", u);
    }
    return o;
}

static int copy_rules(const egress_rules_t *from, egress_rules_t *to)
{
    memset(to, 0, sizeof *to);
    to->set = from->set;
    to->default_allow = from->default_allow;
    memcpy(to->udp, from->udp, sizeof to->udp);
    to->n_udp = from->n_udp;
    for (size_t i = 0; i < from->n_allow; i++)
        if (list_add(&to->allow, &to->n_allow, from->allow[i]) < 0)
            return SBX_ENOMEM;
    for (size_t i = 0; i < from->n_deny; i++)
        if (list_add(&to->deny, &to->n_deny, from->deny[i]) < 0)
            return SBX_ENOMEM;
    return 0;
}

/* Whether the tenant allows every name canonical rule e names (a wildcard:
 * all below it; its denies are kept in the result, so they need not be
 * looked at for a wildcard). */
static bool tenant_covers(const egress_rules_t *t, const char *e, const char **ret_rule)
{
    if (strncmp(e, "*.", 2) != 0)
        return egress_allowed(t, e, ret_rule);
    *ret_rule = "default";
    if (t->default_allow)
        return true;
    for (size_t i = 0; i < t->n_allow; i++) {
        const char *a = t->allow[i];
        if (strncmp(a, "*.", 2) != 0)
            continue;
        /* "*.y" covers "*.x" when x is y or below it */
        if (strcmp(a, e) == 0 || ends_below(strchr(e, '.') + 1, a))
            return true;
    }
    return false;
}

int egress_rules_within(const egress_rules_t *tenant, const egress_rules_t *req, const char *what,
                        egress_rules_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    if (!tenant || !tenant->set || !req || !req->set) {
        const egress_rules_t *only = tenant && tenant->set ? tenant : req;
        if (only && copy_rules(only, ret) < 0) {
            egress_rules_release(ret);
            return api_error_set(err, API_INTERNAL, "out of memory");
        }
        return 0;
    }
    if (req->default_allow && !tenant->default_allow)
        return api_error_set(err, API_POLICY_DENIED, "%s.default allow: the tenant's policy allows only the domains "
                             "it lists", what);
    for (size_t i = 0; i < req->n_allow; i++) {
        const char *rule = NULL;
        if (!tenant_covers(tenant, req->allow[i], &rule))
            return api_error_set(err, API_POLICY_DENIED, "%s.allow[%zu] (%s): the tenant's policy does not allow "
                                 "it (%s%s)", what, i, req->allow[i], strcmp(rule, "default") == 0 ? "" : "rule ",
                                 strcmp(rule, "default") == 0 ? "not listed" : rule);
    }
    for (size_t i = 0; i < req->n_udp; i++)
        if (!egress_udp_allowed(tenant, req->udp[i]))
            return api_error_set(err, API_POLICY_DENIED, "%s.udp[%zu] (%u): the tenant's policy does not allow UDP "
                                 "to that port", what, i, (unsigned)req->udp[i]);
    if (copy_rules(req, ret) < 0) {
        egress_rules_release(ret);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    for (size_t i = 0; i < tenant->n_deny; i++)
        if (list_add(&ret->deny, &ret->n_deny, tenant->deny[i]) < 0) {
            egress_rules_release(ret);
            return api_error_set(err, API_INTERNAL, "out of memory");
        }
    return 0;
}
