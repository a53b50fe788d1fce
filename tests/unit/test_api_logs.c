/* Unit tests for the parameters of GET /v1/sandboxes/{id}/logs
 * (api_logs_parse) and the tail of kept output (api_logs_tail_lines). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "grant.h"

START_TEST(test_defaults_are_all_lines_without_follow)
{
    int64_t tail = 5;
    bool follow = true;
    api_error_t err;
    ck_assert_int_eq(api_logs_parse(NULL, NULL, &tail, &follow, &err), 0);
    ck_assert_int_eq(tail, GRANT_LOGS_TAIL_ALL);
    ck_assert(!follow);
    ck_assert_int_eq(api_logs_parse("all", "true", &tail, &follow, &err), 0);
    ck_assert_int_eq(tail, GRANT_LOGS_TAIL_ALL);
    ck_assert(follow);
    ck_assert_int_eq(api_logs_parse("0", "0", &tail, &follow, &err), 0);
    ck_assert_int_eq(tail, 0);
    ck_assert(!follow);
    ck_assert_int_eq(api_logs_parse("1000000", "1", &tail, &follow, &err), 0);
    ck_assert_int_eq(tail, 1000000);
    ck_assert(follow);
    ck_assert_int_eq(api_logs_parse("42", "false", &tail, &follow, &err), 0);
    ck_assert_int_eq(tail, 42);
}
END_TEST

START_TEST(test_bad_parameters_are_refused_and_leave_the_outputs)
{
    static const char *const tails[] = { "", "-1", "+1", "01", "1000001", "12345678", "1e3", "abc", "all ", " 1", "ALL" };
    static const char *const follows[] = { "", "yes", "TRUE", "2", "true ", "on" };
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        int64_t tail = 7;
        bool follow = true;
        api_error_t err;
        ck_assert_msg(api_logs_parse(tails[i], NULL, &tail, &follow, &err) == SBX_EINVAL, "accepted tail [%s]",
                      tails[i]);
        ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
        ck_assert_int_eq(tail, 7);
    }
    for (size_t i = 0; i < sizeof follows / sizeof follows[0]; i++) {
        int64_t tail = 7;
        bool follow = true;
        api_error_t err;
        ck_assert_msg(api_logs_parse(NULL, follows[i], &tail, &follow, &err) == SBX_EINVAL, "accepted follow [%s]",
                      follows[i]);
        ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
        ck_assert(follow);
    }
}
END_TEST

START_TEST(test_tail_lines_of_kept_output)
{
    const char *t = "one\ntwo\nthree\n";
    ck_assert_str_eq(api_logs_tail_lines(t, -1), t);
    ck_assert_str_eq(api_logs_tail_lines(t, 0), "");
    ck_assert_str_eq(api_logs_tail_lines(t, 1), "three\n");
    ck_assert_str_eq(api_logs_tail_lines(t, 2), "two\nthree\n");
    ck_assert_str_eq(api_logs_tail_lines(t, 3), t);
    ck_assert_str_eq(api_logs_tail_lines(t, 100), t);
    ck_assert_str_eq(api_logs_tail_lines("a\nno newline", 1), "no newline");
    ck_assert_str_eq(api_logs_tail_lines("", 3), "");
    ck_assert_str_eq(api_logs_tail_lines("\n\n", 1), "\n");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("api_logs");
    unit_tcase_add(s, "params", UNIT_TESTS(
        test_defaults_are_all_lines_without_follow,
        test_bad_parameters_are_refused_and_leave_the_outputs,
        test_tail_lines_of_kept_output,
    ));
    return s;
}
