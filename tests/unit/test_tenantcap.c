/* Unit tests for the per-tenant fair shares of one controller (controller/tenantcap.c). */
#include "check_util.h"
#include <string.h>

#include "config.h"
#include "policy.h"
#include "tenantcap.h"

static tenantcap_limits_t limits_of(int64_t transfers, int64_t shells, int64_t logs, int64_t conns)
{
    tenantcap_limits_t l = { .max = { [TCAP_TRANSFERS] = transfers, [TCAP_SHELLS] = shells,
                                      [TCAP_LOG_STREAMS] = logs, [TCAP_WORKER_CONNS] = conns } };
    return l;
}

START_TEST(test_tenantcap_limits_are_the_tighter_of_setting_and_policy)
{
    cfg_t cfg;
    ck_assert_int_eq(cfg_init(&cfg), 0);
    tenantcap_limits_t l;
    tenantcap_limits(&cfg, NULL, &l);
    ck_assert_int_eq(l.max[TCAP_TRANSFERS], 16);
    ck_assert_int_eq(l.max[TCAP_SHELLS], 8);
    ck_assert_int_eq(l.max[TCAP_LOG_STREAMS], 32);
    ck_assert_int_eq(l.max[TCAP_WORKER_CONNS], 64);
    policy_t p;
    policy_init(&p);
    p.max_shells = 2;            /* tighter: taken */
    p.max_log_streams = 1000;    /* looser: the setting stands */
    tenantcap_limits(&cfg, &p, &l);
    ck_assert_int_eq(l.max[TCAP_SHELLS], 2);
    ck_assert_int_eq(l.max[TCAP_LOG_STREAMS], 32);
    char err[128];
    ck_assert_int_eq(cfg_set(&cfg, "tenant_max_shells", "1", "test", err, sizeof err), 0);
    tenantcap_limits(&cfg, &p, &l);
    ck_assert_int_eq(l.max[TCAP_SHELLS], 1);
    ck_assert_int_ne(cfg_set(&cfg, "tenant_max_transfers", "65", "test", err, sizeof err), 0); /* over the 64 in all */
    cfg_release(&cfg);
}
END_TEST

START_TEST(test_tenantcap_refuses_at_the_limit_and_takes_all_or_none)
{
    tenantcap_limits_t l = limits_of(3, 2, 5, 100);
    tenantcap_hold_t a = { .kinds = 0 }, b = { .kinds = 0 }, c = { .kinds = 0 }, d = { .kinds = 0 };
    unsigned shell = TCAP_BIT(TCAP_TRANSFERS) | TCAP_BIT(TCAP_SHELLS) | TCAP_BIT(TCAP_WORKER_CONNS);
    tcap_kind_t over = TCAP__COUNT;
    ck_assert_int_eq(tenantcap_take(&a, "tnt_a", shell, &l, &over), 0);
    ck_assert_int_eq(tenantcap_take(&b, "tnt_a", shell, &l, &over), 0);
    ck_assert_int_eq(tenantcap_take(&c, "tnt_a", shell, &l, &over), SBX_ETOOBIG);
    ck_assert_int_eq(over, TCAP_SHELLS);
    ck_assert_uint_eq(c.kinds, 0);
    /* nothing of the refused take was kept: transfers and connections still 2 */
    ck_assert_int_eq(tenantcap_count("tnt_a", TCAP_TRANSFERS), 2);
    ck_assert_int_eq(tenantcap_count("tnt_a", TCAP_WORKER_CONNS), 2);
    /* a download takes the third transfer; a fourth transfer is refused */
    ck_assert_int_eq(tenantcap_take(&d, "tnt_a", TCAP_BIT(TCAP_TRANSFERS), &l, &over), 0);
    ck_assert_int_eq(tenantcap_take(&c, "tnt_a", TCAP_BIT(TCAP_TRANSFERS), &l, &over), SBX_ETOOBIG);
    ck_assert_int_eq(over, TCAP_TRANSFERS);
    /* another tenant is not touched */
    ck_assert_int_eq(tenantcap_take(&c, "tnt_b", shell, &l, &over), 0);
    ck_assert_int_eq(tenantcap_count("tnt_b", TCAP_SHELLS), 1);
    tenantcap_release(&c);
    ck_assert_int_eq(tenantcap_count("tnt_b", TCAP_SHELLS), 0);
    /* a release makes room; a second release is a no-op */
    tenantcap_release(&a);
    tenantcap_release(&a);
    ck_assert_int_eq(tenantcap_count("tnt_a", TCAP_SHELLS), 1);
    ck_assert_int_eq(tenantcap_take(&a, "tnt_a", TCAP_BIT(TCAP_SHELLS), &l, &over), 0);
    tenantcap_release(&a);
    tenantcap_release(&b);
    tenantcap_release(&d);
    for (int k = 0; k < TCAP__COUNT; k++)
        ck_assert_int_eq(tenantcap_count("tnt_a", (tcap_kind_t)k), 0);
}
END_TEST

START_TEST(test_tenantcap_add_extends_a_hold)
{
    tenantcap_limits_t l = limits_of(10, 10, 1, 10);
    tenantcap_hold_t a = { .kinds = 0 }, b = { .kinds = 0 };
    ck_assert_int_eq(tenantcap_take(&a, "tnt_c", TCAP_BIT(TCAP_WORKER_CONNS), &l, NULL), 0);
    ck_assert_int_eq(tenantcap_add(&a, TCAP_BIT(TCAP_LOG_STREAMS) | TCAP_BIT(TCAP_WORKER_CONNS), &l, NULL), 0);
    ck_assert_int_eq(tenantcap_count("tnt_c", TCAP_WORKER_CONNS), 1); /* held already: not twice */
    ck_assert_int_eq(tenantcap_count("tnt_c", TCAP_LOG_STREAMS), 1);
    ck_assert_int_eq(tenantcap_take(&b, "tnt_c", TCAP_BIT(TCAP_LOG_STREAMS), &l, NULL), SBX_ETOOBIG);
    tenantcap_release(&a);
    ck_assert_int_eq(tenantcap_count("tnt_c", TCAP_LOG_STREAMS), 0);
    ck_assert_int_eq(tenantcap_count("tnt_c", TCAP_WORKER_CONNS), 0);
}
END_TEST

START_TEST(test_tenantcap_message_names_the_setting_and_the_policy_field)
{
    tenantcap_limits_t l = limits_of(16, 8, 32, 64);
    char msg[300];
    tenantcap_message(&l, TCAP_SHELLS, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "8 shells"));
    ck_assert_ptr_nonnull(strstr(msg, "tenant_max_shells"));
    ck_assert_ptr_nonnull(strstr(msg, "max_shells"));
    tenantcap_message(&l, TCAP_WORKER_CONNS, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "tenant_max_worker_connections"));
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("tenantcap");
    unit_tcase_add(s, "tenantcap", UNIT_TESTS(test_tenantcap_limits_are_the_tighter_of_setting_and_policy,
                                              test_tenantcap_refuses_at_the_limit_and_takes_all_or_none,
                                              test_tenantcap_add_extends_a_hold,
                                              test_tenantcap_message_names_the_setting_and_the_policy_field, ));
    return s;
}
