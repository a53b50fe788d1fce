/* libevent's error pages rewritten into the JSON error shape (controller/http_errpage.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "http_errpage.h"

/* A page exactly as libevent 2.1.12's evhttp_send_error queues it. */
static void add_page(struct evbuffer *b, int status, const char *reason)
{
    char body[512];
    int n = snprintf(body, sizeof body,
                     "<HTML><HEAD>\n<TITLE>%d %s</TITLE>\n</HEAD><BODY>\n<H1>%s</H1>\n</BODY></HTML>\n", status,
                     reason, reason);
    evbuffer_add_printf(b,
                        "HTTP/1.1 %d %s\r\nContent-Type: text/html\r\nConnection: close\r\n"
                        "Date: Tue, 01 Dec 2026 13:31:14 GMT\r\nContent-Length: %d\r\n\r\n%s",
                        status, reason, n, body);
}

static char *text_of(struct evbuffer *b)
{
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    evbuffer_copyout(b, s, n);
    s[n] = '\0';
    return s;
}

static void check_rewritten(int status, const char *reason, const char *want_status_line, const char *want_code)
{
    struct evbuffer *b = evbuffer_new();
    add_page(b, status, reason);
    ck_assert(http_errpage_rewrite(b));
    char *s = text_of(b);
    ck_assert_msg(strncmp(s, want_status_line, strlen(want_status_line)) == 0, "got %s", s);
    ck_assert_ptr_nonnull(strstr(s, "Content-Type: application/json\r\n"));
    ck_assert_ptr_nonnull(strstr(s, "Connection: close\r\n"));
    ck_assert_ptr_nonnull(strstr(s, want_code));
    ck_assert_ptr_null(strstr(s, "<HTML>"));
    /* Content-Length is the body's */
    const char *cl = strstr(s, "Content-Length: ");
    const char *body = strstr(s, "\r\n\r\n");
    ck_assert_ptr_nonnull(cl);
    ck_assert_int_eq(strtol(cl + 16, NULL, 10), (long)strlen(body + 4));
    free(s);
    evbuffer_free(b);
}

START_TEST(test_libevent_pages_become_json_errors)
{
    check_rewritten(400, "Bad Request", "HTTP/1.1 400 ", "{\"error\":{\"code\":\"invalid_argument\",\"message\":");
    check_rewritten(413, "Request Entity Too Large", "HTTP/1.1 413 ", "\"code\":\"payload_too_large\"");
    check_rewritten(417, "Expectation Failed", "HTTP/1.1 400 ", "\"code\":\"invalid_argument\"");
    check_rewritten(501, "Not Implemented", "HTTP/1.1 405 ", "\"code\":\"method_not_allowed\"");
    check_rewritten(503, "out of memory", "HTTP/1.1 503 ", "\"code\":\"unavailable\"");
}
END_TEST

START_TEST(test_what_precedes_the_page_is_kept)
{
    static const char first[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{}\n";
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, first, sizeof first - 1);
    add_page(b, 400, "Bad Request");
    /* as a socket bufferevent keeps its output between writes */
    evbuffer_freeze(b, 1);
    ck_assert(http_errpage_rewrite(b));
    ck_assert_int_lt(evbuffer_drain(b, 0), 0); /* frozen again */
    evbuffer_unfreeze(b, 1);
    char *s = text_of(b);
    ck_assert_int_eq(strncmp(s, first, sizeof first - 1), 0);
    ck_assert_int_eq(strncmp(s + sizeof first - 1, "HTTP/1.1 400 Bad Request\r\n", 26), 0);
    free(s);
    evbuffer_free(b);
}
END_TEST

START_TEST(test_anything_else_is_left_alone)
{
    /* a page with a header libevent does not send, a wrong length, a body that
     * is not its own, and a plain response ending like one */
    static const char *const others[] = {
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\nConnection: close\r\nX-Extra: 1\r\n"
        "Content-Length: 94\r\n\r\n<HTML><HEAD>\n<TITLE>400 Bad Request</TITLE>\n</HEAD><BODY>\n<H1>Bad Request</H1>\n"
        "</BODY></HTML>\n",
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\nConnection: close\r\n"
        "Content-Length: 95\r\n\r\n<HTML><HEAD>\n<TITLE>400 Bad Request</TITLE>\n</HEAD><BODY>\n<H1>Bad Request</H1>\n"
        "</BODY></HTML>\n",
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\nConnection: close\r\n"
        "Content-Length: 94\r\n\r\n<HTML><HEAD>\n<TITLE>400 Bad Thing!</TITLE>\n</HEAD><BODY>\n<H1>Bad Request</H1>\n"
        "</BODY></HTML>\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello</H1>\n</BODY></HTML>\n",
        "</H1>\n</BODY></HTML>\n",
        "",
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, others[i], strlen(others[i]));
        ck_assert_msg(!http_errpage_rewrite(b), "rewrote case %zu", i);
        ck_assert_uint_eq(evbuffer_get_length(b), strlen(others[i]));
        evbuffer_free(b);
    }
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("http_errpage");
    unit_tcase_add(s, "rewrite", UNIT_TESTS(
        test_libevent_pages_become_json_errors,
        test_what_precedes_the_page_is_kept,
        test_anything_else_is_left_alone,
    ));
    return s;
}
