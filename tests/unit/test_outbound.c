/* Unit tests for the worker's outbound exec result (agent_exec_result_json):
 * the docs/api.md shape, UTF-8 repair and the report size bound. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "b64.h"
#include "jsonx.h"
#include "runtime.h"
#include "sbuf.h"

static void result_init(runtime_exec_result_t *r, size_t limit)
{
    memset(r, 0, sizeof *r);
    sbuf_init(&r->out, limit);
    sbuf_init(&r->err, limit);
}

START_TEST(test_exec_result_has_every_documented_field)
{
    runtime_exec_result_t r;
    result_init(&r, 4);
    r.exit_code = 3;
    r.duration_ms = 12;
    sbuf_append_bounded(&r.out, "hello\n", 6);
    sbuf_append_bounded(&r.err, "e", 1);
    json_object *o = agent_exec_result_json(&r, 1 << 20);
    ck_assert_ptr_nonnull(o);
    int64_t v;
    bool b;
    ck_assert(jsonx_get_int(o, "exit_code", &v) && v == 3);
    ck_assert(jsonx_get_int(o, "signal", &v) && v == 0);
    ck_assert(jsonx_get_bool(o, "timed_out", &b) && !b);
    ck_assert(jsonx_get_int(o, "duration_ms", &v) && v == 12);
    ck_assert_str_eq(jsonx_get_str(o, "stdout"), "hell");
    ck_assert_str_eq(jsonx_get_str(o, "stderr"), "e");
    ck_assert(jsonx_get_bool(o, "stdout_truncated", &b) && b);
    ck_assert(jsonx_get_bool(o, "stderr_truncated", &b) && !b);
    ck_assert(jsonx_get_int(o, "stdout_bytes", &v) && v == 6);
    ck_assert(jsonx_get_int(o, "stderr_bytes", &v) && v == 1);
    ck_assert_int_eq(json_object_object_length(o), 10);
    json_object_put(o);
    runtime_exec_result_release(&r);
}
END_TEST

START_TEST(test_invalid_utf8_is_replaced)
{
    runtime_exec_result_t r;
    result_init(&r, 64);
    sbuf_append_bounded(&r.out, "a\xff\0b", 4);
    json_object *o = agent_exec_result_json(&r, 1 << 20);
    ck_assert_str_eq(jsonx_get_str(o, "stdout"), "a\xef\xbf\xbd\xef\xbf\xbd" "b");
    int64_t v;
    ck_assert(jsonx_get_int(o, "stdout_bytes", &v) && v == 4);
    json_object_put(o);
    runtime_exec_result_release(&r);
}
END_TEST

START_TEST(test_escaping_heavy_output_is_cut_to_the_json_bound)
{
    runtime_exec_result_t r;
    result_init(&r, 100000);
    char ctl[100000];
    memset(ctl, 0x01, sizeof ctl); /* each becomes \u0001: six bytes */
    sbuf_append_bounded(&r.out, ctl, sizeof ctl);
    sbuf_append_bounded(&r.err, "\xc3\xa9\xc3\xa9\xc3\xa9", 6);
    json_object *o = agent_exec_result_json(&r, 50000);
    ck_assert_ptr_nonnull(o);
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    ck_assert_uint_le(strlen(text), 50000);
    bool b;
    int64_t v;
    ck_assert(jsonx_get_bool(o, "stdout_truncated", &b) && b);
    ck_assert(jsonx_get_int(o, "stdout_bytes", &v) && v == 100000);
    /* stderr is small: whatever was cut, it stays valid UTF-8. */
    const char *e = jsonx_get_str(o, "stderr");
    ck_assert(strlen(e) % 2 == 0);
    json_object_put(o);
    runtime_exec_result_release(&r);
}
END_TEST

START_TEST(test_binary_output_keeps_its_exact_bytes_in_b64)
{
    runtime_exec_result_t r;
    result_init(&r, 64);
    sbuf_append_bounded(&r.out, "a\0b\xff", 4);
    sbuf_append_bounded(&r.err, "text\n", 5);
    json_object *o = agent_exec_result_json(&r, 1 << 20);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(jsonx_get_str(o, "stdout"), "a\xef\xbf\xbd" "b\xef\xbf\xbd");
    ck_assert_str_eq(jsonx_get_str(o, "stdout_b64"), "YQBi/w==");
    /* valid text has no base64 form */
    ck_assert(!json_object_object_get_ex(o, "stderr_b64", NULL));
    json_object_put(o);
    runtime_exec_result_release(&r);
}
END_TEST

START_TEST(test_binary_output_cut_to_the_bound_keeps_one_prefix)
{
    runtime_exec_result_t r;
    result_init(&r, 200000);
    char bin[200000];
    for (size_t i = 0; i < sizeof bin; i++)
        bin[i] = (char)(i * 7);
    sbuf_append_bounded(&r.out, bin, sizeof bin);
    json_object *o = agent_exec_result_json(&r, 100000);
    ck_assert_ptr_nonnull(o);
    ck_assert_uint_le(strlen(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)), 100000);
    bool b;
    ck_assert(jsonx_get_bool(o, "stdout_truncated", &b) && b);
    const char *enc = jsonx_get_str(o, "stdout_b64");
    ck_assert_ptr_nonnull(enc);
    char *dec = NULL;
    size_t n = 0;
    ck_assert_int_eq(b64_decode(enc, strlen(enc), sizeof bin, &dec, &n), 0);
    ck_assert_uint_gt(n, 0);
    ck_assert_mem_eq(dec, bin, n);
    free(dec);
    json_object_put(o);
    runtime_exec_result_release(&r);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("outbound");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_exec_result_has_every_documented_field,
        test_invalid_utf8_is_replaced,
        test_escaping_heavy_output_is_cut_to_the_json_bound,
        test_binary_output_keeps_its_exact_bytes_in_b64,
        test_binary_output_cut_to_the_bound_keeps_one_prefix,
    ));
    return s;
}
