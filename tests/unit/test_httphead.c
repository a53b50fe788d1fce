/* The one HTTP/1.x request-head parser (common/httphead.c): what it keeps,
 * each malformed case it refuses (with a reason), its line-end options and
 * its bounds. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "errors.h"
#include "httphead.h"

static const httphead_opts_t strict = { .bare_lf = false, .keep_headers = true };
static const httphead_opts_t lenient = { .bare_lf = true, .keep_headers = false };

/* Parses a copy of text (its whole length) with opts; *keep holds the copy. */
static int parse(const char *text, const httphead_opts_t *opts, httphead_t *h, char **keep, char *why, size_t whylen)
{
    *keep = strdup(text);
    ck_assert_ptr_nonnull(*keep);
    return httphead_parse(*keep, strlen(*keep), opts, h, why, whylen);
}

START_TEST(test_request_line_and_headers_are_kept)
{
    httphead_t h;
    char *b, why[160] = "";
    ck_assert_int_eq(parse("PUT /a/b?c=1 HTTP/1.1\r\nHost: x.example\r\nX-A: \t v w \t\r\nx-a:last\r\n\r\n", &strict,
                           &h, &b, why, sizeof why), 0);
    ck_assert_str_eq(h.method, "PUT");
    ck_assert_str_eq(h.target, "/a/b?c=1");
    ck_assert_int_eq(h.minor, 1);
    ck_assert_int_eq(h.nh, 3);
    ck_assert_str_eq(h.name[1], "X-A");
    ck_assert_str_eq(h.value[1], "v w");
    ck_assert_str_eq(httphead_get(&h, "X-a"), "last");
    ck_assert_str_eq(httphead_get(&h, "HOST"), "x.example");
    ck_assert_ptr_null(httphead_get(&h, "missing"));
    free(b);
    ck_assert_int_eq(parse("GET / HTTP/1.0\r\n\r\n", &strict, &h, &b, why, sizeof why), 0);
    ck_assert_int_eq(h.minor, 0);
    ck_assert_int_eq(h.nh, 0);
    free(b);
}
END_TEST

START_TEST(test_malformed_heads_are_refused_with_a_reason)
{
    static const struct {
        const char *head;
        const char *reason;
    } bad[] = {
        { "GARBAGE\r\n\r\n", "METHOD TARGET" },
        { "GET /\r\n\r\n", "METHOD TARGET" },
        { "GET / HTTP/1.1 extra\r\n\r\n", "METHOD TARGET" },
        { "GET  / HTTP/1.1\r\n\r\n", "METHOD TARGET" },
        { " / HTTP/1.1\r\n\r\n", "start with a method" },
        { "ABCDEFGHIJKLMNOP / HTTP/1.1\r\n\r\n", "start with a method" },
        { "G(T / HTTP/1.1\r\n\r\n", "token" },
        { "GET http://evil/ HTTP/1.1\r\n\r\n", "starting with '/'" },
        { "GET /\x7f HTTP/1.1\r\n\r\n", "printable" },
        { "GET /\x01 HTTP/1.1\r\n\r\n", "printable" },
        { "GET / HTTP/2.0\r\n\r\n", "HTTP/1.0 or HTTP/1.1" },
        { "GET / http/1.1\r\n\r\n", "HTTP/1.0 or HTTP/1.1" },
        { "GET / HTTP/1.1\r\nno colon\r\n\r\n", "Name: value" },
        { "GET / HTTP/1.1\r\n: empty\r\n\r\n", "Name: value" },
        { "GET / HTTP/1.1\r\nBad Name: a\r\n\r\n", "token" },
        { "GET / HTTP/1.1\r\nHost : a\r\n\r\n", "token" },
        { "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", "folded" },
        { "GET / HTTP/1.1\r\nA: b\r\n\tfolded\r\n\r\n", "folded" },
        { "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", "control" },
        { "GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n", "control" },
        { "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", "blank line" },
        { "GET / HTTP/1.1\r\nA: b\r\n", "blank line" },
        { "GET / HTTP/1.1\r\n\r\nbody", "after the head" },
        { "\r\nGET / HTTP/1.1\r\n\r\n", "METHOD TARGET" },
        { "GET / HTTP/1.1", "CRLF" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        httphead_t h;
        char *b, why[160] = "";
        int r = parse(bad[i].head, &strict, &h, &b, why, sizeof why);
        ck_assert_msg(r == SBX_EINVAL, "head %zu: %d, not SBX_EINVAL", i, r);
        ck_assert_msg(strstr(why, bad[i].reason) != NULL, "head %zu: reason [%s] does not say [%s]", i, why,
                      bad[i].reason);
        free(b);
    }
}
END_TEST

START_TEST(test_a_nul_byte_is_refused)
{
    char t[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
    httphead_t h;
    char why[160] = "";
    ck_assert_int_eq(httphead_parse(t, sizeof t - 1, &strict, &h, why, sizeof why), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "NUL"));
}
END_TEST

START_TEST(test_bare_lf_only_when_allowed)
{
    httphead_t h;
    char *b, why[160] = "";
    ck_assert_int_eq(parse("GET / HTTP/1.1\nHost: a\n\n", &strict, &h, &b, why, sizeof why), SBX_EINVAL);
    free(b);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\nHost: a\n\r\n", &strict, &h, &b, why, sizeof why), SBX_EINVAL);
    free(b);
    ck_assert_int_eq(parse("GET / HTTP/1.1\nHost: a\r\n\n", &lenient, &h, &b, why, sizeof why), 0);
    ck_assert_str_eq(h.method, "GET");
    ck_assert_int_eq(h.nh, 0); /* not kept */
    free(b);
    /* the end of the head, by the same rule */
    const char *t = "GET / HTTP/1.1\nHost: a\n\nbody";
    ck_assert_uint_eq(httphead_end(t, strlen(t), true), strlen(t) - 4);
    ck_assert_uint_eq(httphead_end(t, strlen(t), false), 0);
    t = "GET / HTTP/1.1\r\nHost: a\r\n\r\nbody";
    ck_assert_uint_eq(httphead_end(t, strlen(t), false), strlen(t) - 4);
    ck_assert_uint_eq(httphead_end(t, strlen(t), true), strlen(t) - 4);
    t = "GET / HTTP/1.1\r\n\r";
    ck_assert_uint_eq(httphead_end(t, strlen(t), false), 0);
}
END_TEST

START_TEST(test_the_number_of_kept_headers_is_bounded)
{
    size_t cap = 64 + (SBX_HTTP_MAX_HEADERS + 2) * 8;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    size_t n = (size_t)snprintf(buf, cap, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < SBX_HTTP_MAX_HEADERS; i++)
        n += (size_t)snprintf(buf + n, cap - n, "A: b\r\n");
    snprintf(buf + n, cap - n, "\r\n");
    httphead_t h;
    char *b, why[160] = "";
    ck_assert_int_eq(parse(buf, &strict, &h, &b, why, sizeof why), 0);
    ck_assert_int_eq(h.nh, SBX_HTTP_MAX_HEADERS);
    free(b);
    snprintf(buf + n, cap - n, "A: b\r\n\r\n");
    ck_assert_int_eq(parse(buf, &strict, &h, &b, why, sizeof why), SBX_ETOOBIG);
    free(b);
    /* only checked, not kept: no bound but the head's own size */
    ck_assert_int_eq(parse(buf, &lenient, &h, &b, why, sizeof why), 0);
    free(b);
    free(buf);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("httphead");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_request_line_and_headers_are_kept,
        test_malformed_heads_are_refused_with_a_reason,
        test_a_nul_byte_is_refused,
        test_bare_lf_only_when_allowed,
        test_the_number_of_kept_headers_is_bounded,
    ));
    return s;
}
