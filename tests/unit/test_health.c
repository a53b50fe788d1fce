/* Unit tests for worker/health: finding the end of a request head, parsing
 * it strictly, and the /readyz verdict from the runtime and controller
 * checks. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_util.h"
#include "errors.h"
#include "health.h"
#include "jsonx.h"

static int parse(const char *text, health_request_t *rq, char *why, size_t whylen)
{
    size_t n = health_head_end(text, strlen(text));
    ck_assert_msg(n > 0, "no end of head found in [%s]", text);
    return health_request_parse(text, n, rq, why, whylen);
}

START_TEST(test_head_end_needs_the_blank_line)
{
    const char *t = "GET /healthz HTTP/1.1\r\nHost: a\r\n";
    ck_assert_uint_eq(health_head_end(t, strlen(t)), 0);
    t = "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nbody";
    ck_assert_uint_eq(health_head_end(t, strlen(t)), strlen(t) - 4);
    t = "GET /healthz HTTP/1.1\nHost: a\n\n";
    ck_assert_uint_eq(health_head_end(t, strlen(t)), strlen(t));
    t = "GET /healthz HTTP/1.1\r\n\r";
    ck_assert_uint_eq(health_head_end(t, strlen(t)), 0);
}
END_TEST

START_TEST(test_get_with_query_and_headers_is_parsed)
{
    health_request_t rq;
    char why[160] = "";
    ck_assert_int_eq(parse("GET /readyz?verbose=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.29\r\n\r\n",
                           &rq, why, sizeof why), 0);
    ck_assert_str_eq(rq.method, "GET");
    ck_assert_str_eq(rq.path, "/readyz");
    ck_assert(!rq.head_only);
    ck_assert_int_eq(parse("HEAD /healthz HTTP/1.0\n\n", &rq, why, sizeof why), 0);
    ck_assert_str_eq(rq.path, "/healthz");
    ck_assert(rq.head_only);
}
END_TEST

START_TEST(test_malformed_heads_are_refused_with_a_reason)
{
    static const char *const bad[] = {
        "GARBAGE\r\n\r\n",
        "GET /healthz\r\n\r\n",
        "GET  /healthz HTTP/1.1\r\n\r\n",
        "GET healthz HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/2.0\r\n\r\n",
        "GET /healthz HTTP/1.1 extra\r\n\r\n",
        "G(T /healthz HTTP/1.1\r\n\r\n",
        "GET /health\x01z HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
        "GET /healthz HTTP/1.1\r\n: empty name\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost : a\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nX: a\x7f\r\n\r\n",
        "\r\nGET /healthz HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        health_request_t rq;
        char why[160] = "";
        ck_assert_msg(parse(bad[i], &rq, why, sizeof why) == SBX_EINVAL, "accepted bad head %zu", i);
        ck_assert_msg(why[0] != '\0', "no reason for bad head %zu", i);
    }
}
END_TEST

START_TEST(test_a_nul_byte_is_refused)
{
    const char t[] = "GET /healthz HTTP/1.1\r\nX: a\0b\r\n\r\n";
    health_request_t rq;
    char why[160] = "";
    size_t n = health_head_end(t, sizeof t - 1);
    ck_assert_uint_eq(n, sizeof t - 1);
    ck_assert_int_eq(health_request_parse(t, n, &rq, why, sizeof why), SBX_EINVAL);
}
END_TEST

START_TEST(test_a_long_path_is_parsed_as_no_path)
{
    char t[1200];
    char path[1000];
    memset(path, 'a', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    snprintf(t, sizeof t, "GET %s HTTP/1.1\r\n\r\n", path);
    health_request_t rq;
    char why[160] = "";
    ck_assert_int_eq(parse(t, &rq, why, sizeof why), 0);
    ck_assert_str_eq(rq.path, "");
}
END_TEST

/* The readiness verdict and the check named as failing. */
static void check_ready(const health_runtime_status_t *rt, const health_controller_status_t *ctl, bool stopping,
                        int want_status, const char *failing, const char *want_error)
{
    int status = 0;
    json_object *o = health_readiness(rt, ctl, 30000, stopping, 100000, &status);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(status, want_status);
    ck_assert_str_eq(jsonx_get_str(o, "status"), want_status == 200 ? "ready" : "unready");
    json_object *checks = jsonx_get_obj(o, "checks");
    ck_assert_ptr_nonnull(jsonx_get_obj(checks, "runtime"));
    ck_assert_ptr_nonnull(jsonx_get_obj(checks, "controller"));
    if (failing) {
        json_object *c = jsonx_get_obj(checks, failing);
        bool ok = true;
        ck_assert_msg(jsonx_get_bool(c, "ok", &ok) && !ok, "check %s should fail: %s", failing,
                      json_object_to_json_string(o));
        const char *e = jsonx_get_str(c, "error");
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(strstr(e, want_error) != NULL, "error [%s] should contain [%s]", e, want_error);
    }
    json_object_put(o);
}

START_TEST(test_readiness_names_what_failed)
{
    health_runtime_status_t rt = { .checked = true, .ok = true, .checked_ms = 99000 };
    health_controller_status_t ctl = { .registered = true, .worker_id = "wrk_1", .last_contact_ms = 95000 };
    check_ready(&rt, &ctl, false, 200, NULL, NULL);

    health_runtime_status_t down = { .checked = true, .ok = false, .checked_ms = 99000 };
    snprintf(down.error, sizeof down.error, "docker engine at /tmp/x.sock: Timeout was reached");
    check_ready(&down, &ctl, false, 503, "runtime", "docker engine at /tmp/x.sock");

    health_runtime_status_t never = { 0 };
    check_ready(&never, &ctl, false, 503, "runtime", "not been checked");

    health_runtime_status_t stale = { .checked = true, .ok = true, .checked_ms = 100000 - HEALTH_CHECK_STALE_MS - 1 };
    check_ready(&stale, &ctl, false, 503, "runtime", "last runtime check finished");

    health_controller_status_t unreg = { .registered = false };
    snprintf(unreg.last_error, sizeof unreg.last_error, "failed to register: connection refused");
    check_ready(&rt, &unreg, false, 503, "controller", "not registered with the controller: last error: failed to");

    health_controller_status_t silent = { .registered = true, .last_contact_ms = 100000 - 30001 };
    check_ready(&rt, &silent, false, 503, "controller", "no answer from the controller for 30 s");

    check_ready(&rt, &ctl, true, 503, "shutdown", "shutting down");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("health");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_head_end_needs_the_blank_line,
        test_get_with_query_and_headers_is_parsed,
        test_malformed_heads_are_refused_with_a_reason,
        test_a_nul_byte_is_refused,
        test_a_long_path_is_parsed_as_no_path,
        test_readiness_names_what_failed,
    ));
    return s;
}
