/* Unit tests for observed container state (common/observed.c): the strict
 * reading of a worker's fields and the failure they amount to. */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "observed.h"

/* Parses js into *o and reads it; returns observed_from_json's result. */
static int read_observed(const char *js, json_object **o, observed_t *ob, api_error_t *err)
{
    ck_assert_int_eq(jsonx_parse(js, strlen(js), o, NULL), 0);
    return observed_from_json(*o, "inventory[0]", ob, err);
}

START_TEST(test_running_entry_has_no_details)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed("{\"sandbox_id\":\"sbx_1\",\"state\":\"running\"}", &o, &ob, &err), 0);
    ck_assert_str_eq(ob.state, "running");
    ck_assert(!ob.has_exit_code);
    ck_assert(!observed_stopped(ob.state));
    json_object_put(o);
}
END_TEST

START_TEST(test_killed_container_is_exited_with_signal)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed("{\"state\":\"exited\",\"exit_code\":137,\"oom_killed\":false,"
                                   "\"finished_at\":\"2026-12-01T09:21:43.396600731Z\",\"output_tail\":\"a\\nbye\\n\"}",
                                   &o, &ob, &err), 0);
    ck_assert(observed_stopped(ob.state));
    ck_assert_str_eq(observed_reason(&ob), OBSERVED_EXITED);
    json_object *f = observed_failure_json(&ob);
    ck_assert_str_eq(jsonx_get_str(f, "reason"), "exited");
    int64_t code = 0;
    ck_assert(jsonx_get_int(f, "exit_code", &code));
    ck_assert_int_eq(code, 137);
    ck_assert_str_eq(jsonx_get_str(f, "message"),
                     "the main process exited with code 137 (killed by signal 9, SIGKILL); last output: bye");
    json_object_put(f);
    json_object_put(o);
}
END_TEST

START_TEST(test_oom_flag_wins_over_exit_code)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed("{\"state\":\"exited\",\"exit_code\":137,\"oom_killed\":true}", &o, &ob, &err), 0);
    ck_assert_str_eq(observed_reason(&ob), OBSERVED_OOM_KILLED);
    char msg[512];
    observed_message(&ob, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "OOM killer") != NULL, "message: %s", msg);
    json_object_put(o);
}
END_TEST

START_TEST(test_disk_quota_wins_over_the_kill_signal)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed("{\"state\":\"exited\",\"exit_code\":137,\"oom_killed\":true,"
                                   "\"disk_quota_exceeded\":true}", &o, &ob, &err), 0);
    ck_assert(ob.disk_quota_exceeded);
    ck_assert_str_eq(observed_reason(&ob), OBSERVED_DISK_QUOTA);
    json_object *f = observed_failure_json(&ob);
    ck_assert_str_eq(jsonx_get_str(f, "reason"), "disk_quota_exceeded");
    ck_assert_msg(strstr(jsonx_get_str(f, "message"), "disk quota") != NULL, "message: %s",
                  jsonx_get_str(f, "message"));
    json_object_put(f);
    json_object_put(o);
    /* Only a stopped container is judged; a wrong type is refused. */
    ck_assert_int_eq(read_observed("{\"state\":\"running\",\"disk_quota_exceeded\":true}", &o, &ob, &err), 0);
    ck_assert_str_ne(observed_reason(&ob), OBSERVED_DISK_QUOTA);
    json_object_put(o);
    ck_assert_int_eq(read_observed("{\"state\":\"exited\",\"disk_quota_exceeded\":1}", &o, &ob, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "inventory[0].disk_quota_exceeded must be a boolean") != NULL, "%s", err.message);
    json_object_put(o);
}
END_TEST

START_TEST(test_runtime_error_without_finish_is_a_start_failure)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed("{\"state\":\"created\",\"exit_code\":127,\"finished_at\":\"0001-01-01T00:00:00Z\","
                                   "\"error\":\"exec: \\\"sleep\\\": executable file not found in $PATH\"}",
                                   &o, &ob, &err), 0);
    ck_assert_str_eq(observed_reason(&ob), OBSERVED_START_FAILED);
    ck_assert(!observed_time_known(ob.finished_at));
    char msg[512];
    observed_message(&ob, msg, sizeof msg);
    ck_assert_str_eq(msg, "the runtime could not start the main process: exec: \"sleep\": executable file not found "
                          "in $PATH");
    json_object_put(o);
}
END_TEST

START_TEST(test_plain_exit_code_and_last_line)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed("{\"state\":\"exited\",\"exit_code\":3,\"output_tail\":\"one\\n\\tbroken image\\r\\n\\n\"}",
                                   &o, &ob, &err), 0);
    char msg[512];
    observed_message(&ob, msg, sizeof msg);
    ck_assert_str_eq(msg, "the main process exited with code 3; last output: broken image");
    json_object_put(o);
}
END_TEST

/* Each hostile field is refused with a message naming it. */
static const struct bad {
    const char *js;
    const char *field;
} bads[] = {
    { "{}", "state" },
    { "{\"state\":7}", "state" },
    { "{\"state\":\"Exited; DROP\"}", "state" },
    { "{\"state\":\"exited\",\"exit_code\":\"137\"}", "exit_code" },
    { "{\"state\":\"exited\",\"exit_code\":1.5}", "exit_code" },
    { "{\"state\":\"exited\",\"exit_code\":99999999999}", "exit_code" },
    { "{\"state\":\"exited\",\"exit_code\":-2}", "exit_code" },
    { "{\"state\":\"exited\",\"oom_killed\":1}", "oom_killed" },
    { "{\"state\":\"exited\",\"finished_at\":\"yesterday\"}", "finished_at" },
    { "{\"state\":\"exited\",\"finished_at\":\"2026-02-30T00:00:00Z\"}", "finished_at" },
    { "{\"state\":\"exited\",\"finished_at\":\"2026-01-01T25:00:00Z\"}", "finished_at" },
    { "{\"state\":\"exited\",\"error\":{\"a\":1}}", "error" },
    { "{\"state\":\"exited\",\"error\":\"a\\u0000b\"}", "error" },
    { "{\"state\":\"exited\",\"error\":\"line\\nbreak\"}", "error" },
    { "{\"state\":\"exited\",\"output_tail\":[\"x\"]}", "output_tail" },
    { "{\"state\":\"exited\",\"output_tail\":\"a\\u0000\"}", "output_tail" },
};

START_TEST(test_hostile_fields_are_refused)
{
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed(bads[_i].js, &o, &ob, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, bads[_i].field) != NULL, "%s: %s", bads[_i].js, err.message);
    ck_assert_msg(strstr(err.message, "inventory[0]") != NULL, "%s", err.message);
    json_object_put(o);
}
END_TEST

START_TEST(test_output_tail_is_bounded)
{
    size_t n = SBX_OUTPUT_TAIL_MAX + 1;
    char *big = malloc(n + 64);
    ck_assert_ptr_nonnull(big);
    int k = snprintf(big, 64, "{\"state\":\"exited\",\"output_tail\":\"");
    memset(big + k, 'x', n);
    snprintf(big + k + n, 64 - 0, "\"}");
    json_object *o;
    observed_t ob;
    api_error_t err;
    ck_assert_int_eq(read_observed(big, &o, &ob, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "output_tail is longer") != NULL, "%s", err.message);
    json_object_put(o);
    /* Exactly the bound is fine. */
    memset(big + k, 'y', n - 1);
    snprintf(big + k + n - 1, 64, "\"}");
    ck_assert_int_eq(read_observed(big, &o, &ob, &err), 0);
    ck_assert_uint_eq(ob.output_tail_len, SBX_OUTPUT_TAIL_MAX);
    json_object_put(o);
    free(big);
}
END_TEST

START_TEST(test_time_forms)
{
    ck_assert(observed_time_ok("2026-12-01T09:21:43Z"));
    ck_assert(observed_time_ok("2024-02-29T23:59:59.123456789Z"));
    ck_assert(observed_time_ok("2026-12-01T09:21:43+02:00"));
    ck_assert(!observed_time_ok("2025-02-29T00:00:00Z"));
    ck_assert(!observed_time_ok("2026-12-01T09:21:43.1234567890Z"));
    ck_assert(!observed_time_ok("2026-12-01 09:21:43Z"));
    ck_assert(!observed_time_ok("2026-12-01T09:21:43"));
    ck_assert(!observed_time_ok("0000-01-01T00:00:00Z"));
    ck_assert(observed_time_known("2026-12-01T09:21:43Z"));
    ck_assert(!observed_time_known("0001-01-01T00:00:00Z"));
}
END_TEST

START_TEST(test_removed_failure)
{
    json_object *f = observed_removed_failure_json();
    ck_assert_str_eq(jsonx_get_str(f, "reason"), "removed");
    ck_assert(!json_object_object_get_ex(f, "exit_code", NULL));
    json_object_put(f);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("observed");
    TCase *tc = unit_tcase_add(s, "observed", UNIT_TESTS(
        test_running_entry_has_no_details,
        test_killed_container_is_exited_with_signal,
        test_oom_flag_wins_over_exit_code,
        test_disk_quota_wins_over_the_kill_signal,
        test_runtime_error_without_finish_is_a_start_failure,
        test_plain_exit_code_and_last_line,
        test_output_tail_is_bounded,
        test_time_forms,
        test_removed_failure,
    ));
    tcase_add_loop_test(tc, test_hostile_fields_are_refused, 0, (int)(sizeof bads / sizeof bads[0]));
    return s;
}
