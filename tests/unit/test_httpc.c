/* What the clients say of an answer that is not the API's (common/httpc.c
 * httpc_api_error): a proxy's page named by its status and its own words. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "httpc.h"
#include "jsonx.h"

static void answer(httpc_response_t *r, long status, const char *body)
{
    memset(r, 0, sizeof *r);
    r->status = status;
    r->body = body ? strdup(body) : NULL;
    r->body_len = body ? strlen(body) : 0;
    if (body)
        jsonx_parse(body, strlen(body), &r->json, NULL);
}

START_TEST(test_the_api_error_body_is_used_as_is)
{
    httpc_response_t r;
    const char *code, *msg;
    answer(&r, 409, "{\"error\":{\"code\":\"conflict\",\"message\":\"sandbox x is deleted\"}}");
    httpc_api_error(&r, &code, &msg);
    ck_assert_str_eq(code, "conflict");
    ck_assert_str_eq(msg, "sandbox x is deleted");
    httpc_response_release(&r);
}
END_TEST

START_TEST(test_a_proxy_page_is_named_by_its_status_and_title)
{
    httpc_response_t r;
    const char *code, *msg;
    answer(&r, 413, "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center>"
                    "<h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n"
                    "</body>\r\n</html>\r\n");
    httpc_api_error(&r, &code, &msg);
    ck_assert_str_eq(code, "http_error");
    ck_assert_str_eq(msg, "HTTP 413 without the API's error body, so likely from a proxy in front of the "
                          "controller: 413 Request Entity Too Large");
    httpc_response_release(&r);
    answer(&r, 502, "<HTML><HEAD>\n<TITLE>502 Bad\n  Gateway</TITLE></HEAD></HTML>");
    httpc_api_error(&r, &code, &msg);
    ck_assert_ptr_nonnull(strstr(msg, ": 502 Bad Gateway"));
    httpc_response_release(&r);
}
END_TEST

START_TEST(test_plain_text_gives_its_first_line_and_nothing_gives_empty)
{
    httpc_response_t r;
    const char *code, *msg;
    answer(&r, 504, "upstream timed out\nsecond line\n");
    httpc_api_error(&r, &code, &msg);
    ck_assert_ptr_nonnull(strstr(msg, "controller: upstream timed out"));
    ck_assert_ptr_null(strstr(msg, "second"));
    httpc_response_release(&r);
    answer(&r, 503, NULL);
    httpc_api_error(&r, &code, &msg);
    ck_assert_ptr_nonnull(strstr(msg, "HTTP 503 without the API's error body"));
    ck_assert_ptr_nonnull(strstr(msg, "(an empty body)"));
    httpc_response_release(&r);
    /* bytes that are not printable never reach a terminal */
    answer(&r, 400, "bad\x1b[31m red\x7f");
    httpc_api_error(&r, &code, &msg);
    ck_assert_ptr_null(strchr(msg, 0x1b));
    httpc_response_release(&r);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("httpc");
    unit_tcase_add(s, "errors", UNIT_TESTS(test_the_api_error_body_is_used_as_is,
                                           test_a_proxy_page_is_named_by_its_status_and_title,
                                           test_plain_text_gives_its_first_line_and_nothing_gives_empty,));
    return s;
}
