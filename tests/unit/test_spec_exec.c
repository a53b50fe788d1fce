/* Unit tests for the strict exec request and kv list codecs (common/spec.c);
 * the create request codec is in test_spec.c. */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"

/* Asserts that an exec request is refused as invalid_argument with a
 * message containing `want`, and leaves *ret empty. */
static void expect_exec_error(const char *text, const char *want)
{
    json_object *o = unit_json(text);
    exec_spec_t s;
    api_error_t err = { 0 };
    memset(&s, 0x5A, sizeof s);
    unit_expect_invalid("exec", text, exec_spec_from_json(o, &s, &err), &err, want);
    ck_assert_uint_eq(s.argc, 0);
    ck_assert_ptr_null(s.argv);
    ck_assert_ptr_null(s.cwd);
    exec_spec_release(&s);
    json_object_put(o);
}

/* Decodes an exec request that must be valid. */
static void exec_ok(const char *text, exec_spec_t *s)
{
    json_object *o = unit_json(text);
    api_error_t err = { 0 };
    ck_assert_msg(exec_spec_from_json(o, s, &err) == 0, "exec %.200s refused: %s", text, err.message);
    json_object_put(o);
}

/* ---- exec requests ---- */

START_TEST(test_minimal_exec_gets_defaults)
{
    exec_spec_t s;
    exec_ok("{\"argv\":[\"ls\"]}", &s);
    ck_assert_uint_eq(s.argc, 1);
    ck_assert_str_eq(s.argv[0], "ls");
    ck_assert_ptr_null(s.argv[1]);
    ck_assert_ptr_null(s.cwd);
    ck_assert_uint_eq(s.env.n, 0);
    ck_assert_int_eq(s.timeout_seconds, EXEC_DEFAULT_TIMEOUT);
    ck_assert_int_eq(s.max_output_bytes, 0);
    exec_spec_release(&s);
}
END_TEST

START_TEST(test_exec_round_trip_keeps_values)
{
    exec_spec_t a, b;
    exec_ok("{\"argv\":[\"sh\",\"-c\",\"echo hello; exit 3\",\"\"],\"env\":{\"K\":\"V\"},\"cwd\":\"/work dir\","
            "\"timeout_seconds\":86400,\"max_output_bytes\":1048576}",
            &a);
    ck_assert_uint_eq(a.argc, 4);
    ck_assert_str_eq(a.argv[2], "echo hello; exit 3");
    ck_assert_str_eq(a.argv[3], "");
    ck_assert_ptr_null(a.argv[4]);
    ck_assert_str_eq(a.cwd, "/work dir");
    ck_assert_int_eq(a.timeout_seconds, 86400);
    ck_assert_int_eq(a.max_output_bytes, 1048576);

    json_object *o = exec_spec_to_json(&a);
    char *d1 = jsonx_dump(o);
    ck_assert_str_eq(d1, "{\"argv\":[\"sh\",\"-c\",\"echo hello; exit 3\",\"\"],\"env\":{\"K\":\"V\"},"
                         "\"cwd\":\"/work dir\",\"timeout_seconds\":86400,\"max_output_bytes\":1048576}");
    api_error_t err;
    memset(&err, 0, sizeof err);
    ck_assert_msg(exec_spec_from_json(o, &b, &err) == 0, "canonical exec refused: %s", err.message);
    ck_assert_uint_eq(b.argc, a.argc);
    for (size_t i = 0; i < a.argc; i++)
        ck_assert_str_eq(b.argv[i], a.argv[i]);
    ck_assert_str_eq(b.cwd, a.cwd);
    ck_assert_uint_eq(b.env.n, 1);
    ck_assert_str_eq(b.env.items[0].key, "K");
    ck_assert_str_eq(b.env.items[0].value, "V");
    ck_assert_int_eq(b.timeout_seconds, a.timeout_seconds);
    ck_assert_int_eq(b.max_output_bytes, a.max_output_bytes);
    free(d1);
    json_object_put(o);
    exec_spec_release(&a);
    exec_spec_release(&b);
}
END_TEST

START_TEST(test_exec_round_trip_of_defaults_keeps_null_cwd)
{
    exec_spec_t a, b;
    exec_ok("{\"argv\":[\"true\"]}", &a);
    json_object *o = exec_spec_to_json(&a);
    char *d = jsonx_dump(o);
    ck_assert_str_eq(d, "{\"argv\":[\"true\"],\"env\":{},\"cwd\":null,\"timeout_seconds\":600,"
                        "\"max_output_bytes\":0}");
    api_error_t err;
    ck_assert_int_eq(exec_spec_from_json(o, &b, &err), 0);
    ck_assert_ptr_null(b.cwd);
    ck_assert_int_eq(b.timeout_seconds, 600);
    ck_assert_int_eq(b.max_output_bytes, 0);
    free(d);
    json_object_put(o);
    exec_spec_release(&a);
    exec_spec_release(&b);
}
END_TEST

START_TEST(test_exec_body_not_an_object_is_rejected)
{
    expect_exec_error("[\"ls\"]", "request body must be a JSON object");
    expect_exec_error("\"ls -l\"", "request body must be a JSON object");
}
END_TEST

START_TEST(test_exec_unknown_field_is_named)
{
    expect_exec_error("{\"argv\":[\"ls\"],\"shell\":true}", "unknown field \"shell\" in the exec request");
    expect_exec_error("{\"argv\":[\"ls\"],\"command\":\"ls\"}", "unknown field \"command\"");
}
END_TEST

START_TEST(test_exec_argv_missing_is_rejected)
{
    expect_exec_error("{}", "argv is required");
    expect_exec_error("{\"argv\":null}", "argv is required");
    expect_exec_error("{\"cwd\":\"/\"}", "argv is required");
}
END_TEST

START_TEST(test_exec_argv_shell_string_is_rejected)
{
    expect_exec_error("{\"argv\":\"echo hello; rm -rf /\"}", "argv must be an array of strings, never a shell string");
    expect_exec_error("{\"argv\":{\"0\":\"ls\"}}", "argv must be an array");
    expect_exec_error("{\"argv\":1}", "argv must be an array");
}
END_TEST

START_TEST(test_exec_argv_empty_array_is_rejected)
{
    expect_exec_error("{\"argv\":[]}", "argv must name a command (it is empty)");
}
END_TEST

START_TEST(test_exec_argv_non_string_element_is_rejected)
{
    expect_exec_error("{\"argv\":[1]}", "argv[0] must be a string");
    expect_exec_error("{\"argv\":[\"ls\",\"-l\",2]}", "argv[2] must be a string");
    expect_exec_error("{\"argv\":[\"ls\",null]}", "argv[1] must be a string");
    expect_exec_error("{\"argv\":[\"ls\",[\"-l\"]]}", "argv[1] must be a string");
    expect_exec_error("{\"argv\":[\"ls\",\"a\\u0000b\"]}", "argv[1] must not contain NUL bytes");
}
END_TEST

START_TEST(test_exec_empty_argv0_is_rejected)
{
    expect_exec_error("{\"argv\":[\"\"]}", "argv[0] must not be empty");
    expect_exec_error("{\"argv\":[\"\",\"x\"]}", "argv[0] must not be empty");
}
END_TEST

START_TEST(test_exec_too_many_argv_entries_are_rejected)
{
    size_t cap = 16 + (SBX_MAX_ARGV + 1) * 4 + 16;
    char *text = unit_xmalloc(cap);
    size_t o = (size_t)snprintf(text, cap, "{\"argv\":[");
    for (int i = 0; i < SBX_MAX_ARGV + 1; i++)
        o += (size_t)snprintf(text + o, cap - o, "%s\"a\"", i ? "," : "");
    snprintf(text + o, cap - o, "]}");
    expect_exec_error(text, "argv has 257 entries; at most 256 are allowed");

    /* Exactly SBX_MAX_ARGV is fine. */
    o = (size_t)snprintf(text, cap, "{\"argv\":[");
    for (int i = 0; i < SBX_MAX_ARGV; i++)
        o += (size_t)snprintf(text + o, cap - o, "%s\"a\"", i ? "," : "");
    snprintf(text + o, cap - o, "]}");
    exec_spec_t s;
    exec_ok(text, &s);
    ck_assert_uint_eq(s.argc, SBX_MAX_ARGV);
    exec_spec_release(&s);
    free(text);
}
END_TEST

START_TEST(test_exec_argv_too_long_in_total_is_rejected)
{
    /* Two arguments of 32 KiB: 2 * (32768 + 1) > 64 KiB. */
    char *arg = unit_repeat('x', 32768);
    size_t cap = 2 * 32768 + 64;
    char *text = unit_xmalloc(cap);
    snprintf(text, cap, "{\"argv\":[\"%s\",\"%s\"]}", arg, arg);
    expect_exec_error(text, "argv is longer than 65536 bytes in total");
    /* One argument of 64 KiB - 1 plus its NUL fits exactly. */
    free(arg);
    arg = unit_repeat('y', SBX_MAX_ARGV_BYTES - 1);
    snprintf(text, cap, "{\"argv\":[\"%s\"]}", arg);
    exec_spec_t s;
    exec_ok(text, &s);
    ck_assert_uint_eq(strlen(s.argv[0]), SBX_MAX_ARGV_BYTES - 1);
    exec_spec_release(&s);
    free(arg);
    free(text);
}
END_TEST

START_TEST(test_exec_relative_cwd_is_rejected)
{
    expect_exec_error("{\"argv\":[\"ls\"],\"cwd\":\"tmp\"}", "cwd must be an absolute path");
    expect_exec_error("{\"argv\":[\"ls\"],\"cwd\":\"./tmp\"}", "cwd must be an absolute path");
    expect_exec_error("{\"argv\":[\"ls\"],\"cwd\":\"~/x\"}", "cwd must be an absolute path");
    expect_exec_error("{\"argv\":[\"ls\"],\"cwd\":\"\"}", "cwd must be 1 to 1024 printable bytes");
    expect_exec_error("{\"argv\":[\"ls\"],\"cwd\":1}", "cwd must be a string");
    expect_exec_error("{\"argv\":[\"ls\"],\"cwd\":\"/tmp\\n\"}", "cwd must be 1 to 1024 printable bytes");
}
END_TEST

START_TEST(test_exec_timeout_out_of_range_is_rejected)
{
    static const char *values[] = { "0", "-1", "86401", "1000000000000000", "-1000000000000000" };
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        char text[128];
        snprintf(text, sizeof text, "{\"argv\":[\"ls\"],\"timeout_seconds\":%s}", values[i]);
        expect_exec_error(text, "timeout_seconds must be between 1 and 86400");
    }
    expect_exec_error("{\"argv\":[\"ls\"],\"timeout_seconds\":\"10\"}", "timeout_seconds must be an integer");
    expect_exec_error("{\"argv\":[\"ls\"],\"timeout_seconds\":1.5}", "timeout_seconds must be an integer");
    exec_spec_t s;
    exec_ok("{\"argv\":[\"ls\"],\"timeout_seconds\":1}", &s);
    ck_assert_int_eq(s.timeout_seconds, 1);
    exec_spec_release(&s);
}
END_TEST

START_TEST(test_exec_max_output_over_ceiling_is_rejected)
{
    expect_exec_error("{\"argv\":[\"ls\"],\"max_output_bytes\":1048577}",
                      "max_output_bytes must be between 0 and 1048576 (got 1048577)");
    expect_exec_error("{\"argv\":[\"ls\"],\"max_output_bytes\":-1}", "max_output_bytes must be between");
    expect_exec_error("{\"argv\":[\"ls\"],\"max_output_bytes\":1000000000000000}", "max_output_bytes must be between");
    expect_exec_error("{\"argv\":[\"ls\"],\"max_output_bytes\":\"1k\"}", "max_output_bytes must be an integer");
}
END_TEST

START_TEST(test_exec_bad_env_is_rejected)
{
    expect_exec_error("{\"argv\":[\"ls\"],\"env\":{\"1X\":\"v\"}}", "env key \"1X\"");
    expect_exec_error("{\"argv\":[\"ls\"],\"env\":[\"X=v\"]}", "env must be an object");
    expect_exec_error("{\"argv\":[\"ls\"],\"env\":{\"X\":2}}", "env.X must be a string");
}
END_TEST

/* ---- kv lists directly ---- */

START_TEST(test_kv_list_from_null_or_absent_is_empty)
{
    kv_list_t l;
    api_error_t err;
    ck_assert_int_eq(kv_list_from_json(NULL, "env", true, 4, &l, &err), 0);
    ck_assert_uint_eq(l.n, 0);
    ck_assert_ptr_null(l.items);
    json_object *null = NULL;
    ck_assert_int_eq(kv_list_from_json(null, "labels", false, 4, &l, &err), 0);
    kv_list_release(&l);
    kv_list_release(NULL);
}
END_TEST

START_TEST(test_kv_list_round_trips_through_json)
{
    json_object *o = unit_json("{\"A\":\"1\",\"B_2\":\"two\",\"c\":\"\"}");
    kv_list_t l;
    api_error_t err;
    ck_assert_int_eq(kv_list_from_json(o, "env", true, 3, &l, &err), 0);
    ck_assert_uint_eq(l.n, 3);
    json_object *back = kv_list_to_json(&l);
    char *d = jsonx_dump(back);
    ck_assert_str_eq(d, "{\"A\":\"1\",\"B_2\":\"two\",\"c\":\"\"}");
    free(d);
    json_object_put(back);
    kv_list_release(&l);
    ck_assert_uint_eq(l.n, 0);
    ck_assert_ptr_null(l.items);
    /* One more than max is refused. */
    ck_assert_int_eq(kv_list_from_json(o, "env", true, 2, &l, &err), SBX_EINVAL);
    ck_assert_str_eq(err.message, "env has 3 entries; at most 2 are allowed");
    json_object_put(o);
}
END_TEST

/* ---- stdin ---- */

START_TEST(test_exec_stdin_text_and_b64_give_the_same_bytes)
{
    exec_spec_t a, b;
    exec_ok("{\"argv\":[\"cat\"],\"stdin\":\"hi\\n\"}", &a);
    ck_assert(a.has_stdin);
    ck_assert_uint_eq(a.stdin_len, 3);
    ck_assert_mem_eq(a.stdin_data, "hi\n", 3);
    /* "a\0b\xff" in base64 */
    exec_ok("{\"argv\":[\"cat\"],\"stdin_b64\":\"YQBi/w==\"}", &b);
    ck_assert(b.has_stdin);
    ck_assert_uint_eq(b.stdin_len, 4);
    ck_assert_mem_eq(b.stdin_data, "a\0b\xff", 4);
    /* The canonical form always carries base64, and decodes to the same bytes. */
    json_object *o = exec_spec_to_json(&a);
    ck_assert_str_eq(jsonx_get_str(o, "stdin_b64"), "aGkK");
    ck_assert_ptr_null(jsonx_get_str(o, "stdin"));
    exec_spec_t c;
    api_error_t err = { 0 };
    ck_assert_int_eq(exec_spec_from_json(o, &c, &err), 0);
    ck_assert_uint_eq(c.stdin_len, 3);
    ck_assert_mem_eq(c.stdin_data, "hi\n", 3);
    json_object_put(o);
    exec_spec_release(&a);
    exec_spec_release(&b);
    exec_spec_release(&c);
}
END_TEST

START_TEST(test_exec_without_stdin_has_none)
{
    exec_spec_t a;
    exec_ok("{\"argv\":[\"cat\"],\"stdin\":null}", &a);
    ck_assert(!a.has_stdin);
    ck_assert_ptr_null(a.stdin_data);
    json_object *o = exec_spec_to_json(&a);
    ck_assert(!json_object_object_get_ex(o, "stdin_b64", NULL));
    json_object_put(o);
    exec_spec_release(&a);
}
END_TEST

START_TEST(test_exec_bad_stdin_is_rejected)
{
    expect_exec_error("{\"argv\":[\"cat\"],\"stdin\":\"a\",\"stdin_b64\":\"YQ==\"}", "not both");
    expect_exec_error("{\"argv\":[\"cat\"],\"stdin\":5}", "stdin must be a string");
    expect_exec_error("{\"argv\":[\"cat\"],\"stdin_b64\":\"YQ\"}", "not padded standard base64");
    expect_exec_error("{\"argv\":[\"cat\"],\"stdin_b64\":\"Y*==\"}", "not padded standard base64");
}
END_TEST

START_TEST(test_exec_stdin_over_the_inline_limit_is_rejected)
{
    size_t n = SBX_EXEC_STDIN_INLINE_MAX + 1;
    char *big = malloc(n + 64);
    ck_assert_ptr_nonnull(big);
    static const char pre[] = "{\"argv\":[\"cat\"],\"stdin\":\"";
    static const char pre64[] = "{\"argv\":[\"cat\"],\"stdin_b64\":\"";
    size_t pl = sizeof pre - 1, pl64 = sizeof pre64 - 1;
    memcpy(big, pre, pl);
    memset(big + pl, 'x', n);
    memcpy(big + pl + n, "\"}", 3);
    expect_exec_error(big, "over the inline limit of 524288 bytes");
    /* base64 of n bytes: (n + 2) / 3 * 4 characters of 'A' decode to zeros */
    size_t m = (n + 2) / 3 * 4;
    char *big64 = malloc(m + 64);
    ck_assert_ptr_nonnull(big64);
    memcpy(big64, pre64, pl64);
    memset(big64 + pl64, 'A', m);
    memcpy(big64 + pl64 + m, "\"}", 3);
    expect_exec_error(big64, "stdin_b64 is over the inline limit");
    /* exactly the limit is fine */
    memcpy(big + pl + n - 1, "\"}", 3);
    exec_spec_t s;
    exec_ok(big, &s);
    ck_assert_uint_eq(s.stdin_len, SBX_EXEC_STDIN_INLINE_MAX);
    exec_spec_release(&s);
    free(big);
    free(big64);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("spec_exec");
    unit_tcase_add(s, "exec", UNIT_TESTS(
        test_minimal_exec_gets_defaults,
        test_exec_round_trip_keeps_values,
        test_exec_round_trip_of_defaults_keeps_null_cwd,
        test_exec_body_not_an_object_is_rejected,
        test_exec_unknown_field_is_named,
        test_exec_argv_missing_is_rejected,
        test_exec_argv_shell_string_is_rejected,
        test_exec_argv_empty_array_is_rejected,
        test_exec_argv_non_string_element_is_rejected,
        test_exec_empty_argv0_is_rejected,
        test_exec_too_many_argv_entries_are_rejected,
        test_exec_argv_too_long_in_total_is_rejected,
        test_exec_relative_cwd_is_rejected,
        test_exec_timeout_out_of_range_is_rejected,
        test_exec_max_output_over_ceiling_is_rejected,
        test_exec_bad_env_is_rejected,
        test_exec_stdin_text_and_b64_give_the_same_bytes,
        test_exec_without_stdin_has_none,
        test_exec_bad_stdin_is_rejected,
        test_exec_stdin_over_the_inline_limit_is_rejected,
    ));
    unit_tcase_add(s, "kv", UNIT_TESTS(
        test_kv_list_from_null_or_absent_is_empty,
        test_kv_list_round_trips_through_json,
    ));
    return s;
}
