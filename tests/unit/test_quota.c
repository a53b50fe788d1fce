/* Unit tests for tenant quotas over live sandboxes and warm pool
 * reservations (common/quota.c). */
#include "check_util.h"
#include <string.h>

#include "policy.h"
#include "quota.h"

static policy_t quota_policy(int64_t n, int64_t cpu, int64_t mem)
{
    policy_t p;
    policy_init(&p);
    p.max_sandboxes = n;
    p.max_total_cpu_millis = cpu;
    p.max_total_memory_mib = mem;
    return p;
}

START_TEST(test_quota_unset_rules_never_bind)
{
    policy_t p = quota_policy(0, 0, 0);
    quota_use_t live = { 1000, 1000000, 1000000 }, held = { 64, 64000, 64000 }, asked = { 256, 1, 1 };
    api_error_t err;
    ck_assert_int_eq(quota_check(&p, &live, &held, &asked, "pool p of 256", &err), 0);
}
END_TEST

START_TEST(test_quota_a_create_counts_pool_reservations)
{
    policy_t p = quota_policy(3, 0, 0);
    quota_use_t live = { 0, 0, 0 }, held = { 2, 200, 64 }, one = { 1, 100, 32 };
    api_error_t err;
    /* 0 live + 2 held + 1 = 3: fits */
    ck_assert_int_eq(quota_check(&p, &live, &held, &one, NULL, &err), 0);
    live.sandboxes = 1;
    ck_assert_int_eq(quota_check(&p, &live, &held, &one, NULL, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_QUOTA_EXCEEDED);
    ck_assert_str_eq(err.message, "tenant quota max_sandboxes = 3: 1 sandboxes live and 2 held by its warm pools");
    /* without pools the message is the one creates always had */
    quota_use_t none = { 0, 0, 0 };
    live.sandboxes = 3;
    ck_assert_int_eq(quota_check(&p, &live, &none, &one, NULL, &err), SBX_EINVAL);
    ck_assert_str_eq(err.message, "tenant quota max_sandboxes = 3: 3 sandboxes live");
}
END_TEST

START_TEST(test_quota_a_pool_declaration_names_the_rule_and_the_pool)
{
    policy_t p = quota_policy(3, 0, 0);
    quota_use_t live = { 0, 0, 0 }, held = { 2, 200, 64 }, pool = { 2, 200, 64 };
    api_error_t err;
    ck_assert_int_eq(quota_check(&p, &live, &held, &pool, "pool p2 of 2", &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_QUOTA_EXCEEDED);
    ck_assert_str_eq(err.message,
                     "tenant quota max_sandboxes = 3: 0 sandboxes live and 2 held by its warm pools; pool p2 of 2 "
                     "asks 2 more");
    held.sandboxes = held.cpu_millis = held.memory_mib = 0;
    ck_assert_int_eq(quota_check(&p, &live, &held, &pool, "pool p1 of 2", &err), 0);
}
END_TEST

START_TEST(test_quota_cpu_and_memory_bind_in_order)
{
    policy_t p = quota_policy(100, 1000, 512);
    quota_use_t live = { 1, 500, 128 }, held = { 2, 400, 256 }, asked = { 1, 200, 64 };
    api_error_t err;
    ck_assert_int_eq(quota_check(&p, &live, &held, &asked, NULL, &err), SBX_EINVAL);
    ck_assert_str_eq(err.message, "tenant quota max_total_cpu_millis = 1000: 500 in use and 400 held by its warm "
                                  "pools, 200 asked");
    asked.cpu_millis = 100;
    ck_assert_int_eq(quota_check(&p, &live, &held, &asked, NULL, &err), 0);
    asked.memory_mib = 129;
    ck_assert_int_eq(quota_check(&p, &live, &held, &asked, NULL, &err), SBX_EINVAL);
    ck_assert_str_eq(err.message, "tenant quota max_total_memory_mib = 512: 128 MiB in use and 256 held by its warm "
                                  "pools, 129 asked");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("quota");
    unit_tcase_add(s, "quota", UNIT_TESTS(
        test_quota_unset_rules_never_bind,
        test_quota_a_create_counts_pool_reservations,
        test_quota_a_pool_declaration_names_the_rule_and_the_pool,
        test_quota_cpu_and_memory_bind_in_order,
    ));
    return s;
}
