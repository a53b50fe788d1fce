/* Unit tests for the tenant policy codec and its checks. */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "limits.h"
#include "policy.h"

static int parse(const char *js, policy_t *p, api_error_t *err)
{
    json_object *o = NULL;
    ck_assert_int_eq(jsonx_parse(js, strlen(js), &o, NULL), 0);
    int r = policy_from_json(o, p, err);
    json_object_put(o);
    return r;
}

START_TEST(test_policy_round_trip_keeps_set_fields_only)
{
    policy_t p, q;
    api_error_t err;
    ck_assert_int_eq(parse("{\"max_cpu_millis\":500,\"max_sandboxes\":3,\"images\":[\"a/*\",\"b:1\"],"
                           "\"network_modes\":[\"none\",\"open\"],\"routes\":false}", &p, &err), 0);
    json_object *j = policy_to_json(&p);
    ck_assert_int_eq(policy_from_json(j, &q, &err), 0);
    ck_assert_int_eq(q.max_cpu_millis, 500);
    ck_assert_int_eq(q.max_sandboxes, 3);
    ck_assert_int_eq(q.max_memory_mib, 0);
    ck_assert_uint_eq(q.n_images, 2);
    ck_assert_int_eq(q.routes, 0);
    ck_assert(policy_network_allowed(&q, NET_OPEN));
    ck_assert(!policy_network_allowed(&q, NET_RESTRICTED));
    json_object_put(j);
    policy_release(&p);
    policy_release(&q);
}
END_TEST

START_TEST(test_policy_image_patterns_match_exact_and_prefix)
{
    policy_t p;
    api_error_t err;
    ck_assert_int_eq(parse("{\"images\":[\"registry.local/team/*\",\"busybox:1.36\"]}", &p, &err), 0);
    ck_assert(policy_image_allowed(&p, "busybox:1.36"));
    ck_assert(!policy_image_allowed(&p, "busybox:1.37"));
    ck_assert(policy_image_allowed(&p, "registry.local/team/app:2"));
    ck_assert(!policy_image_allowed(&p, "registry.local/team/"));
    ck_assert(!policy_image_allowed(&p, "registry.local/teamx/app"));
    ck_assert(!policy_image_allowed(&p, "registry.local/other/app"));
    policy_release(&p);
    ck_assert_int_eq(parse("{\"images\":[]}", &p, &err), 0);
    ck_assert(!policy_image_allowed(&p, "anything"));
    policy_release(&p);
    ck_assert_int_eq(parse("{}", &p, &err), 0);
    ck_assert(policy_image_allowed(&p, "anything"));
    ck_assert(policy_network_allowed(&p, NET_OPEN));
    policy_release(&p);
}
END_TEST

START_TEST(test_policy_rejects_bad_fields_naming_them)
{
    static const char *const bad[][2] = {
        { "{\"max_cpu_millis\":0}", "max_cpu_millis" },
        { "{\"max_cpu_millis\":-1}", "max_cpu_millis" },
        { "{\"max_sandboxes\":\"3\"}", "max_sandboxes" },
        { "{\"images\":\"a\"}", "images" },
        { "{\"images\":[\"a*b\"]}", "images[0]" },
        { "{\"images\":[\"a/*/b\"]}", "images[0]" },
        { "{\"network_modes\":[\"wide\"]}", "network_modes" },
        { "{\"routes\":1}", "routes" },
        { "{\"max_gpus\":1}", "max_gpus" },
        { "{\"registries\":\"ghcr.io\"}", "registries" },
        { "{\"registries\":[\"https://ghcr.io\"]}", "registries[0]" },
        { "{\"registries\":[\"ghcr.io\",7]}", "registries[1]" },
        { "{\"exec_output_default_bytes\":2000,\"exec_output_max_bytes\":1000}", "exec_output_default_bytes" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        policy_t p;
        api_error_t err;
        ck_assert_int_eq(parse(bad[i][0], &p, &err), SBX_EINVAL);
        ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.message, bad[i][1]), "%s: message [%s] should name %s", bad[i][0], err.message,
                      bad[i][1]);
    }
}
END_TEST

START_TEST(test_policy_max_disk_mib_is_a_bounded_ceiling)
{
    policy_t p;
    api_error_t err;
    ck_assert_int_eq(parse("{\"max_disk_mib\":128}", &p, &err), 0);
    ck_assert_int_eq(p.max_disk_mib, 128);
    json_object *j = policy_to_json(&p);
    int64_t v = 0;
    ck_assert(jsonx_get_int(j, "max_disk_mib", &v) && v == 128);
    json_object_put(j);
    policy_release(&p);
    static const char *const bad[] = { "{\"max_disk_mib\":0}", "{\"max_disk_mib\":-5}", "{\"max_disk_mib\":\"1\"}",
                                       "{\"max_disk_mib\":16777217}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(bad[i], &p, &err), SBX_EINVAL);
        ck_assert_msg(strstr(err.message, "max_disk_mib"), "%s: %s", bad[i], err.message);
    }
}
END_TEST

START_TEST(test_policy_registries_narrow_by_entry)
{
    policy_t p;
    api_error_t err;
    ck_assert_int_eq(parse("{\"registries\":[\"ghcr.io\",\"*.example.com\"]}", &p, &err), 0);
    ck_assert(policy_registry_allowed(&p, "ghcr.io"));
    ck_assert(policy_registry_allowed(&p, "r.example.com"));
    ck_assert(!policy_registry_allowed(&p, "docker.io"));
    json_object *o = policy_to_json(&p);
    ck_assert_str_eq(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                     "{\"registries\":[\"ghcr.io\",\"*.example.com\"]}");
    json_object_put(o);
    policy_release(&p);
    ck_assert_int_eq(parse("{\"registries\":[]}", &p, &err), 0);
    ck_assert(!policy_registry_allowed(&p, "docker.io"));
    policy_release(&p);
    ck_assert_int_eq(parse("{}", &p, &err), 0);
    ck_assert(policy_registry_allowed(&p, "docker.io"));
    policy_release(&p);
}
END_TEST

START_TEST(test_policy_tighter_takes_the_smaller_set_limit)
{
    ck_assert_int_eq(policy_tighter(16000, 0), 16000);
    ck_assert_int_eq(policy_tighter(16000, 500), 500);
    ck_assert_int_eq(policy_tighter(400, 500), 400);
    ck_assert_int_eq(policy_tighter(0, 500), 500);
}
END_TEST

START_TEST(test_policy_egress_allow_is_canonical_cidrs)
{
    policy_t p;
    api_error_t err;
    ck_assert_int_eq(parse("{\"egress_allow\":[\"10.78.3.5/24\",\"192.168.1.7\",\"fd00:1::9/32\",\"0.0.0.0/0\"]}", &p,
                           &err),
                     0);
    ck_assert_uint_eq(p.n_egress_allow, 4);
    json_object *o = policy_to_json(&p);
    ck_assert_str_eq(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
                     "{\"egress_allow\":[\"10.78.3.0/24\",\"192.168.1.7/32\",\"fd00:1::/32\",\"0.0.0.0/0\"]}");
    json_object_put(o);
    policy_release(&p);
    ck_assert_int_eq(parse("{\"egress_allow\":null}", &p, &err), 0);
    ck_assert(!p.egress_allow_set);
    policy_release(&p);
    static const char *const bad[][2] = {
        { "{\"egress_allow\":\"10.0.0.0/8\"}", "policy.egress_allow must be an array" },
        { "{\"egress_allow\":[\"10.0.0.0/8\",\"10.0.0.0/33\"]}", "egress_allow[1] (10.0.0.0/33)" },
        { "{\"egress_allow\":[\"10.0.0/8\"]}", "egress_allow[0] (10.0.0/8)" },
        { "{\"egress_allow\":[\"example.com/8\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[\"10.0.0.0/\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[\"10.0.0.0/8x\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[\"10.0.0.0/-1\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[\"fd00::/129\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[\"\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[\"10.0.0.0/8 -j ACCEPT\"]}", "egress_allow[0]" },
        { "{\"egress_allow\":[7]}", "egress_allow[0] (not a string)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(bad[i][0], &p, &err), SBX_EINVAL);
        ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.message, bad[i][1]), "%s: message [%s] should name %s", bad[i][0], err.message,
                      bad[i][1]);
    }
    char many[2048] = "{\"egress_allow\":[";
    for (int i = 0; i <= SBX_EGRESS_ALLOW_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"10.%d.0.0/16\"", i ? "," : "", i);
    snprintf(many + strlen(many), sizeof many - strlen(many), "]}");
    ck_assert_int_eq(parse(many, &p, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "at most"), "%s", err.message);
}
END_TEST

START_TEST(test_policy_check_limit_names_the_rule_that_binds)
{
    api_error_t err;
    memset(&err, 0, sizeof err);
    /* Within both, and exactly at the tighter one. */
    ck_assert_int_eq(policy_check_limit("ttl_seconds", 600, "max_ttl_seconds", 86400, 3600, &err), 0);
    ck_assert_int_eq(policy_check_limit("ttl_seconds", 3600, "max_ttl_seconds", 86400, 3600, &err), 0);
    ck_assert_int_eq(policy_check_limit("ttl_seconds", 86400, "max_ttl_seconds", 86400, 0, &err), 0);
    /* The tenant's is tighter: it is the one named. */
    ck_assert_int_eq(policy_check_limit("ttl_seconds", 3601, "max_ttl_seconds", 86400, 3600, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_POLICY_DENIED);
    ck_assert_str_eq(err.message, "ttl_seconds 3601 is over the tenant policy max_ttl_seconds = 3600");
    /* No tenant limit, or a looser one: the server ceiling is named. */
    ck_assert_int_eq(policy_check_limit("ttl_seconds", 86401, "max_ttl_seconds", 86400, 0, &err), SBX_EINVAL);
    ck_assert_str_eq(err.message, "ttl_seconds 86401 is over the server ceiling max_ttl_seconds = 86400");
    ck_assert_int_eq(policy_check_limit("ttl_seconds", 90000, "max_ttl_seconds", 86400, 100000, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_POLICY_DENIED);
    ck_assert_str_eq(err.message, "ttl_seconds 90000 is over the server ceiling max_ttl_seconds = 86400");
}
END_TEST

START_TEST(test_policy_max_pool_size_is_bounded_and_unset_by_default)
{
    policy_t p;
    api_error_t err;
    policy_init(&p);
    ck_assert_int_eq(p.max_pool_size, 0); /* unset: the tenant may declare no pool */
    ck_assert_int_eq(parse("{\"max_pool_size\":4}", &p, &err), 0);
    ck_assert_int_eq(p.max_pool_size, 4);
    json_object *j = policy_to_json(&p);
    int64_t v = 0;
    ck_assert(jsonx_get_int(j, "max_pool_size", &v) && v == 4);
    json_object_put(j);
    policy_release(&p);
    static const char *const bad[] = { "{\"max_pool_size\":-1}", "{\"max_pool_size\":257}",
                                       "{\"max_pool_size\":true}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(bad[i], &p, &err), SBX_EINVAL);
        ck_assert_msg(strstr(err.message, "max_pool_size"), "%s: %s", bad[i], err.message);
    }
}
END_TEST

START_TEST(test_policy_max_executors_per_worker_is_bounded)
{
    policy_t p;
    api_error_t err;
    ck_assert_int_eq(parse("{\"max_executors_per_worker\":2}", &p, &err), 0);
    ck_assert_int_eq(p.max_executors_per_worker, 2);
    json_object *j = policy_to_json(&p);
    int64_t v = 0;
    ck_assert(jsonx_get_int(j, "max_executors_per_worker", &v) && v == 2);
    json_object_put(j);
    policy_release(&p);
    static const char *const bad[] = { "{\"max_executors_per_worker\":0}", "{\"max_executors_per_worker\":257}",
                                       "{\"max_executors_per_worker\":\"2\"}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(bad[i], &p, &err), SBX_EINVAL);
        ck_assert_msg(strstr(err.message, "max_executors_per_worker"), "%s: %s", bad[i], err.message);
    }
}
END_TEST

START_TEST(test_policy_exec_output_tenant_keep_bytes_is_bounded)
{
    policy_t p;
    api_error_t err;
    ck_assert_int_eq(parse("{\"exec_output_tenant_keep_bytes\":1048576}", &p, &err), 0);
    ck_assert_int_eq(p.exec_output_tenant_keep_bytes, 1048576);
    json_object *j = policy_to_json(&p);
    int64_t v = 0;
    ck_assert(jsonx_get_int(j, "exec_output_tenant_keep_bytes", &v) && v == 1048576);
    json_object_put(j);
    policy_release(&p);
    char big[96];
    snprintf(big, sizeof big, "{\"exec_output_tenant_keep_bytes\":%lld}", (long long)SBX_OUTPUT_TENANT_KEEP_MAX + 1);
    const char *const bad[] = { "{\"exec_output_tenant_keep_bytes\":0}", big };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(bad[i], &p, &err), SBX_EINVAL);
        ck_assert_msg(strstr(err.message, "exec_output_tenant_keep_bytes"), "%s: %s", bad[i], err.message);
    }
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("policy");
    unit_tcase_add(s, "policy", UNIT_TESTS(
        test_policy_round_trip_keeps_set_fields_only,
        test_policy_image_patterns_match_exact_and_prefix,
        test_policy_rejects_bad_fields_naming_them,
        test_policy_max_disk_mib_is_a_bounded_ceiling,
        test_policy_tighter_takes_the_smaller_set_limit,
        test_policy_registries_narrow_by_entry,
        test_policy_egress_allow_is_canonical_cidrs,
        test_policy_check_limit_names_the_rule_that_binds,
        test_policy_max_pool_size_is_bounded_and_unset_by_default,
        test_policy_max_executors_per_worker_is_bounded,
        test_policy_exec_output_tenant_keep_bytes_is_bounded,
    ));
    return s;
}
