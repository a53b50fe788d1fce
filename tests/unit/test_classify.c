/* Unit tests for trust classification: each rule, table-driven. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "jsonx.h"

static void spec_of(const char *js, sandbox_spec_t *s)
{
    json_object *o = unit_json(js);
    api_error_t err;
    ck_assert_msg(spec_from_json(o, s, &err) == 0, "spec %s: %s", js, err.message);
    json_object_put(o);
}

static void policy_of(const char *js, policy_t *p)
{
    json_object *o = unit_json(js);
    api_error_t err;
    ck_assert_msg(policy_from_json(o, p, &err) == 0, "policy %s: %s", js, err.message);
    json_object_put(o);
}

/* One row: a spec, a tenant policy, whether the server lets tenants open
 * the network to untrusted work, and the outcome. */
static const struct row {
    const char *spec;
    const char *policy;
    bool server_open;
    int want_rc;             /* 0 or SBX_EINVAL */
    const char *trust;
    isolation_t iso;
    bool hardened;
    const char *want;        /* in the error message or in one reason */
} rows[] = {
    /* Trust levels and the default classes. */
    { "{\"image\":\"i\"}", "{}", true, 0, "trusted", ISO_CONTAINER, false, "trusted: no trust flags" },
    { "{\"image\":\"i\",\"trust\":{\"untrusted_repo\":true}}", "{}", true, 0, "untrusted", ISO_CONTAINER, true,
      "untrusted repository" },
    { "{\"image\":\"i\",\"trust\":{\"generated_code\":true}}", "{}", true, 0, "untrusted", ISO_CONTAINER, true,
      "generated code" },
    { "{\"image\":\"i\",\"trust\":{\"untrusted_repo\":true,\"generated_code\":true}}", "{}", true, 0, "untrusted",
      ISO_CONTAINER, true, "untrusted repository and generated code" },
    { "{\"image\":\"i\",\"trust\":{\"hostile\":true,\"generated_code\":true}}", "{}", true, 0, "hostile",
      ISO_MICROVM, true, "needs at least microvm (server rule isolation_hostile)" },
    /* The request may raise the class, never lower it. */
    { "{\"image\":\"i\",\"isolation\":\"gvisor\"}", "{}", true, 0, "trusted", ISO_GVISOR, false,
      "the request asks for at least gvisor" },
    { "{\"image\":\"i\",\"isolation\":\"container\",\"trust\":{\"hostile\":true}}", "{}", true, 0, "hostile",
      ISO_MICROVM, true, "the request accepts container, but the rule requires microvm" },
    /* A tenant raises the class per trust level. */
    { "{\"image\":\"i\",\"trust\":{\"generated_code\":true}}", "{\"isolation_untrusted\":\"gvisor\"}", true, 0,
      "untrusted", ISO_GVISOR, true, "needs at least gvisor (tenant rule isolation_untrusted)" },
    { "{\"image\":\"i\"}", "{\"isolation_trusted\":\"gvisor\"}", true, 0, "trusted", ISO_GVISOR, false,
      "tenant rule isolation_trusted" },
    /* Open network for untrusted work: refused by default. */
    { "{\"image\":\"i\",\"network\":\"open\",\"trust\":{\"untrusted_repo\":true}}", "{}", true, SBX_EINVAL, NULL,
      0, false, "set untrusted_open_network in the tenant policy" },
    { "{\"image\":\"i\",\"network\":\"open\",\"trust\":{\"hostile\":true}}", "{}", true, SBX_EINVAL, NULL, 0, false,
      "not allowed for hostile work" },
    /* ...allowed when the tenant says so... */
    { "{\"image\":\"i\",\"network\":\"open\",\"trust\":{\"untrusted_repo\":true}}",
      "{\"untrusted_open_network\":true}", true, 0, "untrusted", ISO_CONTAINER, true,
      "network open allowed for untrusted work" },
    /* ...unless the server forbids tenants to allow it... */
    { "{\"image\":\"i\",\"network\":\"open\",\"trust\":{\"untrusted_repo\":true}}",
      "{\"untrusted_open_network\":true}", false, SBX_EINVAL, NULL, 0, false, "the server forbids it" },
    /* ...and never with environment values (possible secrets). */
    { "{\"image\":\"i\",\"network\":\"open\",\"env\":{\"TOKEN\":\"x\"},\"trust\":{\"generated_code\":true}}",
      "{\"untrusted_open_network\":true}", true, SBX_EINVAL, NULL, 0, false, "untrusted_secrets_open_network" },
    /* Trusted work with env and open network is fine; restricted untrusted too. */
    { "{\"image\":\"i\",\"network\":\"open\",\"env\":{\"TOKEN\":\"x\"}}", "{}", true, 0, "trusted", ISO_CONTAINER,
      false, "trusted" },
    { "{\"image\":\"i\",\"network\":\"restricted\",\"env\":{\"T\":\"x\"},\"trust\":{\"untrusted_repo\":true}}", "{}",
      true, 0, "untrusted", ISO_CONTAINER, true, "hardened: untrusted work runs with no capabilities" },
    /* Hardening and read-only root asked for by a trusted request. */
    { "{\"image\":\"i\",\"hardened\":true,\"read_only_root\":true}", "{}", true, 0, "trusted", ISO_CONTAINER, true,
      "read-only root filesystem" },
};

START_TEST(test_classify_rows)
{
    const struct row *w = &rows[_i];
    sandbox_spec_t s;
    policy_t p;
    classify_rules_t r;
    classification_t c;
    api_error_t err;
    memset(&err, 0, sizeof err);
    spec_of(w->spec, &s);
    policy_of(w->policy, &p);
    classify_rules_server(&r, ISO_CONTAINER, ISO_CONTAINER, ISO_MICROVM, w->server_open);
    classify_rules_tenant(&r, &p);
    int rc = classify(&s, &r, &c, &err);
    ck_assert_msg(rc == w->want_rc, "row %d (%s): rc %d, want %d (%s)", _i, w->spec, rc, w->want_rc, err.message);
    if (rc < 0) {
        ck_assert_int_eq(err.code, API_POLICY_DENIED);
        ck_assert_msg(strstr(err.message, w->want), "row %d: \"%s\" lacks \"%s\"", _i, err.message, w->want);
    } else {
        ck_assert_str_eq(trust_name(c.trust), w->trust);
        ck_assert_msg(c.isolation == w->iso, "row %d: class %s, want %s", _i, isolation_name(c.isolation),
                      isolation_name(w->iso));
        ck_assert_int_eq(c.hardened, w->hardened);
        bool found = false;
        for (size_t i = 0; i < c.nreasons; i++)
            found = found || strstr(c.reasons[i], w->want) != NULL;
        ck_assert_msg(found, "row %d: no reason contains \"%s\"", _i, w->want);
    }
    spec_release(&s);
    policy_release(&p);
}
END_TEST

START_TEST(test_tenant_cannot_loosen_server_rules)
{
    classify_rules_t r;
    policy_t p;
    api_error_t err;
    classify_rules_server(&r, ISO_CONTAINER, ISO_GVISOR, ISO_MICROVM, false);
    policy_of("{\"isolation_untrusted\":\"container\"}", &p);
    ck_assert_int_eq(classify_policy_check(&p, &r, &err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "isolation_untrusted container is weaker than the server's gvisor"));
    policy_release(&p);
    policy_of("{\"isolation_untrusted\":\"microvm\",\"isolation_trusted\":\"gvisor\"}", &p);
    ck_assert_int_eq(classify_policy_check(&p, &r, &err), 0);
    policy_release(&p);
    policy_of("{\"untrusted_open_network\":true}", &p);
    ck_assert_int_eq(classify_policy_check(&p, &r, &err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "allow_untrusted_open_network"));
    classify_rules_server(&r, ISO_CONTAINER, ISO_GVISOR, ISO_MICROVM, true);
    ck_assert_int_eq(classify_policy_check(&p, &r, &err), 0);
    policy_release(&p);
}
END_TEST

START_TEST(test_classification_json)
{
    sandbox_spec_t s;
    classify_rules_t r;
    classification_t c;
    api_error_t err;
    spec_of("{\"image\":\"i\",\"trust\":{\"generated_code\":true}}", &s);
    classify_rules_server(&r, ISO_CONTAINER, ISO_GVISOR, ISO_MICROVM, true);
    ck_assert_int_eq(classify(&s, &r, &c, &err), 0);
    json_object *o = classification_to_json(&c);
    ck_assert_str_eq(jsonx_get_str(o, "trust"), "untrusted");
    ck_assert_str_eq(jsonx_get_str(o, "isolation"), "gvisor");
    json_object *a = jsonx_get_arr(o, "reasons");
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(json_object_array_length(a), c.nreasons);
    json_object_put(o);
    spec_release(&s);
}
END_TEST

START_TEST(test_policy_isolation_fields_round_trip)
{
    policy_t p, q;
    api_error_t err;
    policy_of("{\"isolation_hostile\":\"microvm\",\"untrusted_open_network\":false}", &p);
    json_object *j = policy_to_json(&p);
    ck_assert_int_eq(policy_from_json(j, &q, &err), 0);
    ck_assert_int_eq(q.isolation_min[TRUST_HOSTILE], ISO_MICROVM);
    ck_assert_int_eq(q.isolation_min[TRUST_TRUSTED], -1);
    ck_assert_int_eq(q.untrusted_open_network, 0);
    json_object_put(j);
    policy_release(&p);
    policy_release(&q);
    json_object *o = NULL;
    ck_assert_int_eq(jsonx_parse("{\"isolation_other\":\"gvisor\"}", 28, &o, NULL), 0);
    ck_assert_int_eq(policy_from_json(o, &p, &err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "unknown field"));
    json_object_put(o);
    ck_assert_int_eq(jsonx_parse("{\"isolation_trusted\":\"vm\"}", 26, &o, NULL), 0);
    ck_assert_int_eq(policy_from_json(o, &p, &err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "policy.isolation_trusted must be one of"));
    json_object_put(o);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("classify");
    TCase *tc = unit_tcase_add(s, "rules", UNIT_TESTS(
        test_tenant_cannot_loosen_server_rules,
        test_classification_json,
        test_policy_isolation_fields_round_trip,
    ));
    tcase_add_loop_test(tc, test_classify_rows, 0, (int)(sizeof rows / sizeof rows[0]));
    return s;
}
