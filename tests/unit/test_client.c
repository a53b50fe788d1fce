/* Unit tests for the client library's error decoding, paths and request
 * bodies (client/client.c, client/request.c); no server needed. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_util.h"
#include "client.h"
#include "errors.h"
#include "jsonx.h"

static const char *body_text(json_object *o)
{
    return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* What client_error_decode makes of an exchange: httpc's return code r, the
 * status, a JSON body (or NULL) and the transport's words (or NULL). */
static client_error_t decode(int r, long status, const char *json, const char *transport, const char *method)
{
    client_t cl = { .url = "http://c:1" };
    httpc_response_t resp;
    memset(&resp, 0, sizeof resp);
    resp.status = status;
    if (json)
        ck_assert_int_eq(jsonx_parse(json, strlen(json), &resp.json, NULL), 0);
    if (transport)
        snprintf(resp.error, sizeof resp.error, "%s", transport);
    client_error_t e;
    client_error_decode(&cl, method, "/v1/x", r, &resp, &e);
    json_object_put(resp.json);
    return e;
}

START_TEST(test_api_error_answer_decodes_to_its_code_and_message)
{
    client_error_t e = decode(0, 404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no sandbox x\"}}", NULL, "GET");
    ck_assert_int_eq(e.kind, CLIENT_E_API);
    ck_assert_str_eq(e.code, "not_found");
    ck_assert_str_eq(e.message, "no sandbox x");
    ck_assert_int_eq(e.status, 404);
    ck_assert(!e.retryable);
}
END_TEST

START_TEST(test_no_answer_is_unavailable_and_retryable)
{
    client_error_t e = decode(SBX_EIO, 0, NULL, "Connection refused", "GET");
    ck_assert(e.retryable);
    ck_assert_str_eq(e.code, "unavailable");
    ck_assert_str_eq(e.message, "cannot reach the controller at http://c:1: Connection refused");
    ck_assert_str_eq(e.detail, "Connection refused");
    ck_assert_int_eq(e.kind, CLIENT_E_UNREACHABLE);
}
END_TEST

START_TEST(test_gateway_answer_without_error_body_is_http_error_and_retryable)
{
    client_error_t e = decode(0, 503, NULL, NULL, "GET");
    ck_assert_int_eq(e.kind, CLIENT_E_HTTP);
    ck_assert_str_eq(e.code, "http_error");
    ck_assert(e.retryable);
    e = decode(0, 200, NULL, NULL, "POST");
    ck_assert_int_eq(e.kind, CLIENT_E_BAD_RESPONSE);
    ck_assert_str_eq(e.message, "POST /v1/x answered 200 without a JSON object");
    ck_assert(!e.retryable);
}
END_TEST

START_TEST(test_rate_limited_is_retryable_but_quota_exceeded_is_not)
{
    client_error_t e = decode(0, 429, "{\"error\":{\"code\":\"rate_limited\",\"message\":\"slow down\"}}", NULL,
                              "GET");
    ck_assert_int_eq(e.kind, CLIENT_E_API);
    ck_assert_str_eq(e.code, "rate_limited");
    ck_assert(e.retryable);
    e = decode(0, 429, "{\"error\":{\"code\":\"quota_exceeded\",\"message\":\"too many sandboxes\"}}", NULL,
               "POST");
    ck_assert_str_eq(e.code, "quota_exceeded");
    ck_assert(!e.retryable);
}
END_TEST

START_TEST(test_path_escapes_the_id_and_refuses_what_does_not_fit)
{
    char buf[64];
    ck_assert_int_eq(client_path(buf, sizeof buf, "/v1/sandboxes/", "a b/c", "/exec"), 0);
    ck_assert_str_eq(buf, "/v1/sandboxes/a%20b%2Fc/exec");
    ck_assert_int_eq(client_path(buf, 16, "/v1/sandboxes/", "sbx_0123456789", NULL), SBX_ETOOBIG);
}
END_TEST

START_TEST(test_create_body_sends_trust_and_only_what_is_set)
{
    json_object *env = json_object_new_object();
    jsonx_add_str(env, "A", "1");
    client_create_spec_t s = { .image = "busybox", .cpu_millis = { 500, true },
                               .untrusted_repo = CLIENT_FLAG_TRUE, .generated_code = CLIENT_FLAG_FALSE,
                               .hardened = CLIENT_FLAG_TRUE, .env = env };
    json_object *b = NULL;
    ck_assert_int_eq(client_create_body(&s, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"image\":\"busybox\",\"cpu_millis\":500,\"trust\":{\"untrusted_repo\":true,"
                                   "\"generated_code\":false},\"env\":{\"A\":\"1\"},\"hardened\":true}");
    json_object_put(b);
    client_create_spec_t none = { 0 };
    ck_assert_int_eq(client_create_body(&none, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"trust\":{}}");
    json_object_put(b);
    json_object_put(env);
}
END_TEST

START_TEST(test_create_body_carries_the_disk_quota)
{
    client_create_spec_t s = { .memory_mib = { 256, true }, .disk_mib = { 64, true } };
    json_object *b = NULL;
    ck_assert_int_eq(client_create_body(&s, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"memory_mib\":256,\"disk_mib\":64,\"trust\":{}}");
    json_object_put(b);
    json_object *args = unit_json("{\"disk_mib\":32,\"wait\":true}");
    ck_assert_int_eq(client_create_body_args(args, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"disk_mib\":32,\"trust\":{}}");
    json_object_put(b);
    json_object_put(args);
}
END_TEST

START_TEST(test_exec_and_share_bodies)
{
    char *argv[] = { "ls", "-l" };
    client_exec_spec_t x = { .argv = argv, .argc = 2, .cwd = "/tmp", .timeout_seconds = { 5, true } };
    json_object *b = NULL;
    ck_assert_int_eq(client_exec_body(&x, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"argv\":[\"ls\",\"-l\"],\"cwd\":\"/tmp\",\"timeout_seconds\":5}");
    json_object_put(b);
    client_share_spec_t sh = { .port = 8080, .auth = "public" };
    ck_assert_int_eq(client_share_body(&sh, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"port\":8080,\"auth\":\"public\"}");
    json_object_put(b);
    client_extend_spec_t ex = { .ttl_seconds = 5 };
    ck_assert_int_eq(client_extend_body(&ex, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"ttl_seconds\":5}");
    json_object_put(b);
}
END_TEST

START_TEST(test_bodies_from_arguments_copy_what_is_given_and_nothing_else)
{
    /* A wrongly typed value goes as given (the server names it); nulls, and
     * arguments that are not body fields, stay out. */
    json_object *args = unit_json("{\"image\":\"busybox\",\"cpu_millis\":\"lots\",\"hostile\":true,"
                                  "\"network\":null,\"wait\":true,\"timeout_seconds\":5,\"labels\":{\"a\":\"b\"}}");
    json_object *b = NULL;
    ck_assert_int_eq(client_create_body_args(args, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"image\":\"busybox\",\"cpu_millis\":\"lots\",\"trust\":{\"hostile\":true},"
                                   "\"labels\":{\"a\":\"b\"}}");
    json_object_put(b);
    json_object_put(args);
    args = unit_json("{\"sandbox_id\":\"sbx_1\",\"argv\":[\"true\"],\"cwd\":7,\"max_output_bytes\":10}");
    ck_assert_int_eq(client_exec_body_args(args, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"argv\":[\"true\"],\"cwd\":7,\"max_output_bytes\":10}");
    json_object_put(b);
    json_object_put(args);
    args = unit_json("{}");
    ck_assert_int_eq(client_create_body_args(args, &b), 0);
    ck_assert_str_eq(body_text(b), "{\"trust\":{}}");
    json_object_put(b);
    json_object_put(args);
}
END_TEST

START_TEST(test_logs_lines_decode_to_a_chunk_an_error_or_a_cut)
{
    client_logs_line_t l;
    const char *chunk = "{\"stream\":\"stderr\",\"data\":\"a\\u0000b\"}";
    ck_assert_int_eq(client_logs_line_decode(chunk, strlen(chunk), &l), 0);
    ck_assert_str_eq(l.stream, "stderr");
    ck_assert_uint_eq(l.len, 3);
    ck_assert(!l.is_error);
    client_logs_line_release(&l);
    const char *err = "{\"error\":{\"code\":\"worker_lost\"}}";
    ck_assert_int_eq(client_logs_line_decode(err, strlen(err), &l), 0);
    ck_assert(l.is_error && !l.stream);
    ck_assert_str_eq(l.code, "worker_lost");
    ck_assert_str_eq(l.message, "the log stream failed");
    client_logs_line_release(&l);
    const char *cut = "{\"truncated\":true,\"limit_bytes\":1024}";
    ck_assert_int_eq(client_logs_line_decode(cut, strlen(cut), &l), 0);
    ck_assert(l.truncated && !l.is_error && !l.stream);
    ck_assert_int_eq(l.limit_bytes, 1024);
    client_logs_line_release(&l);
    ck_assert_int_eq(client_logs_line_decode("[1]", 3, &l), SBX_EINVAL);
}
END_TEST

START_TEST(test_backoff_doubles_up_to_its_cap)
{
    ck_assert_int_eq(client_backoff_next(CLIENT_BACKOFF_START_MS), 2 * CLIENT_BACKOFF_START_MS);
    ck_assert_int_eq(client_backoff_next(CLIENT_BACKOFF_MAX_MS), CLIENT_BACKOFF_MAX_MS);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("client");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_api_error_answer_decodes_to_its_code_and_message,
        test_no_answer_is_unavailable_and_retryable,
        test_gateway_answer_without_error_body_is_http_error_and_retryable,
        test_rate_limited_is_retryable_but_quota_exceeded_is_not,
        test_path_escapes_the_id_and_refuses_what_does_not_fit,
        test_create_body_sends_trust_and_only_what_is_set,
        test_create_body_carries_the_disk_quota,
        test_bodies_from_arguments_copy_what_is_given_and_nothing_else,
        test_exec_and_share_bodies,
        test_logs_lines_decode_to_a_chunk_an_error_or_a_cut,
        test_backoff_doubles_up_to_its_cap,));
    return s;
}
