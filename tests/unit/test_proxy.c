/* The route proxy's pure parts: request heads, route addresses, trusted
 * proxy networks. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "errors.h"
#include "proxy.h"

#define NAME "abcdefghijklmnopqrstuvwxyz"
#define NAME2 "a234567abcdefghijklmnopqrs"

static int parse(const char *text, proxy_head_t *h, char **keep)
{
    *keep = strdup(text);
    return proxy_parse_head(*keep, strlen(*keep), h);
}

START_TEST(test_head_parses_request_line_and_headers)
{
    proxy_head_t h;
    char *b;
    ck_assert_int_eq(parse("GET /r/x/y?z=1 HTTP/1.1\r\nHost: a.example:8081\r\nX-A:  v w \r\nx-a: last\r\n\r\n", &h, &b),
                     0);
    ck_assert_str_eq(h.method, "GET");
    ck_assert_str_eq(h.target, "/r/x/y?z=1");
    ck_assert_int_eq(h.minor, 1);
    ck_assert_int_eq(h.nh, 3);
    ck_assert_str_eq(proxy_head_get(&h, "HOST"), "a.example:8081");
    ck_assert_str_eq(h.value[1], "v w");
    ck_assert_str_eq(proxy_head_get(&h, "X-a"), "last");
    ck_assert_ptr_null(proxy_head_get(&h, "missing"));
    free(b);
    ck_assert_int_eq(parse("POST / HTTP/1.0\r\n\r\n", &h, &b), 0);
    ck_assert_int_eq(h.minor, 0);
    ck_assert_int_eq(h.nh, 0);
    free(b);
}
END_TEST

START_TEST(test_head_refuses_malformed_requests)
{
    static const char *const bad[] = {
        "GET /\r\n\r\n",                                  /* no version */
        "GET / HTTP/2.0\r\n\r\n",                         /* not HTTP/1.x */
        "GET http://evil/ HTTP/1.1\r\nHost: a\r\n\r\n",   /* absolute form */
        "GET  / HTTP/1.1\r\n\r\n",                        /* two spaces */
        "G(T / HTTP/1.1\r\n\r\n",                         /* bad method */
        "GET / HTTP/1.1\r\nHost a\r\n\r\n",               /* no colon */
        "GET / HTTP/1.1\r\nBad Name: a\r\n\r\n",          /* space in a name */
        "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",           /* obsolete folding */
        "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",             /* control character */
        "GET /\x7f HTTP/1.1\r\n\r\n",                     /* DEL in the target */
        "GET / HTTP/1.1\r\nA: b\r\n",                     /* no blank line */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        proxy_head_t h;
        char *b;
        ck_assert_msg(parse(bad[i], &h, &b) == SBX_EINVAL, "accepted: %s", bad[i]);
        free(b);
    }
}
END_TEST

START_TEST(test_head_bounds_the_number_of_headers)
{
    char buf[8192] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i <= PROXY_MAX_HEADERS; i++)
        strcat(buf, "A: b\r\n");
    strcat(buf, "\r\n");
    proxy_head_t h;
    char *b;
    ck_assert_int_eq(parse(buf, &h, &b), SBX_ETOOBIG);
    free(b);
}
END_TEST

START_TEST(test_route_by_path_host_and_redirect)
{
    char name[PROXY_NAME_LEN + 1];
    const char *rest;
    ck_assert_int_eq(proxy_route_for("x", "/r/" NAME "/a/b?c", NULL, name, &rest), PROXY_ROUTE_PATH);
    ck_assert_str_eq(name, NAME);
    ck_assert_str_eq(rest, "/a/b?c");
    ck_assert_int_eq(proxy_route_for("x", "/r/" NAME "/", "", name, &rest), PROXY_ROUTE_PATH);
    ck_assert_str_eq(rest, "/");
    ck_assert_int_eq(proxy_route_for("x", "/r/" NAME, NULL, name, &rest), PROXY_ROUTE_REDIRECT);
    ck_assert_str_eq(rest, "");
    ck_assert_int_eq(proxy_route_for("x", "/r/" NAME "?q=1", NULL, name, &rest), PROXY_ROUTE_REDIRECT);
    ck_assert_str_eq(rest, "?q=1");
    /* by host, case-insensitive, with or without a port; the target stays */
    ck_assert_int_eq(proxy_route_for(NAME2 ".Routes.Example.com:8443", "/x", "routes.example.com", name, &rest),
                     PROXY_ROUTE_HOST);
    ck_assert_str_eq(name, NAME2);
    ck_assert_str_eq(rest, "/x");
    ck_assert_int_eq(proxy_route_for("A234567ABCDEFGHIJKLMNOPQRS.routes.example.com", "/", "routes.example.com",
                                     name, &rest), PROXY_ROUTE_HOST);
    ck_assert_str_eq(name, NAME2);
    /* a host route wins over a path that looks like one */
    ck_assert_int_eq(proxy_route_for(NAME2 ".routes.example.com", "/r/" NAME "/", "routes.example.com", name, &rest),
                     PROXY_ROUTE_HOST);
    ck_assert_str_eq(name, NAME2);
}
END_TEST

START_TEST(test_port_host_names_a_sandbox_port)
{
    char id[SBX_ID_MAX];
    int port = 0;
    /* E2B's getHost: {port}-{id}.{domain}; the host's own port is ignored */
    ck_assert(proxy_port_host("8080-sbx_" NAME ".e2b.example.com", "e2b.example.com", id, &port));
    ck_assert_str_eq(id, "sbx_" NAME);
    ck_assert_int_eq(port, 8080);
    ck_assert(proxy_port_host("1-SBX_" NAME2 ".E2B.example.com:8443", "e2b.example.com", id, &port));
    ck_assert_str_eq(id, "sbx_" NAME2);
    ck_assert_int_eq(port, 1);
    ck_assert(proxy_port_host("65535-sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert_int_eq(port, 65535);
    /* a domain with the listener's port: the host must carry it */
    ck_assert(proxy_port_host("3000-sbx_" NAME ".localhost:9001", "localhost:9001", id, &port));
    ck_assert_int_eq(port, 3000);
    ck_assert(!proxy_port_host("3000-sbx_" NAME ".localhost:9002", "localhost:9001", id, &port));
    ck_assert(!proxy_port_host("3000-sbx_" NAME ".localhost", "localhost:9001", id, &port));
    /* not one */
    ck_assert(!proxy_port_host("0-sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("08080-sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("65536-sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("123456-sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("-sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80sbx_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80-op_" NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80-sbx_" NAME "a.e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80-sbx_abcdefghijklmnopqrstuvwxy1.e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80-sbx_" NAME ".other.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80-sbx_" NAME ".xe2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host(NAME ".e2b.test", "e2b.test", id, &port));
    ck_assert(!proxy_port_host("80-sbx_" NAME ".e2b.test", NULL, id, &port));
    ck_assert(!proxy_port_host("80-sbx_" NAME ".e2b.test", "", id, &port));
    ck_assert(!proxy_port_host(NULL, "e2b.test", id, &port));
    ck_assert(!proxy_port_host("[::1]:80", "e2b.test", id, &port));
}
END_TEST

START_TEST(test_route_refuses_what_is_not_a_route_address)
{
    char name[PROXY_NAME_LEN + 1];
    const char *rest;
    ck_assert_int_eq(proxy_route_for("x", "/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("x", "/r/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("x", "/r/short/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("x", "/r/" NAME "x/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("x", "/r/ABCDEFGHIJKLMNOPQRSTUVWXYZ/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("x", "/r/abcdefghijklmnopqrstuvwxy1/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("x", "/v1/sandboxes", NULL, name, &rest), PROXY_ROUTE_NONE);
    /* hosts: another domain, a nested label, a suffix without the dot, no domain configured */
    ck_assert_int_eq(proxy_route_for(NAME ".other.com", "/", "routes.example.com", name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for("a." NAME ".routes.example.com", "/", "routes.example.com", name, &rest),
                     PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for(NAME "routes.example.com", "/", "routes.example.com", name, &rest),
                     PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for(NAME ".routes.example.com", "/", NULL, name, &rest), PROXY_ROUTE_NONE);
    ck_assert_int_eq(proxy_route_for(NULL, "/", "routes.example.com", name, &rest), PROXY_ROUTE_NONE);
}
END_TEST

static struct sockaddr_storage addr(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(text, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, text, &s6->sin6_addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, text, &s4->sin_addr);
    }
    return ss;
}

START_TEST(test_trusted_proxy_networks)
{
    struct proxy_net *nets;
    int n;
    char err[200];
    ck_assert_int_eq(proxy_nets_parse("127.0.0.1, 10.1.0.0/16,[fd00::]/8", &nets, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 3);
    struct sockaddr_storage a;
    a = addr("127.0.0.1");
    ck_assert(proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    a = addr("127.0.0.2");
    ck_assert(!proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    a = addr("10.1.255.3");
    ck_assert(proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    a = addr("10.2.0.1");
    ck_assert(!proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    a = addr("fd12::1");
    ck_assert(proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    a = addr("fe80::1");
    ck_assert(!proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    a = addr("::ffff:10.1.2.3"); /* IPv4 through a dual-stack socket */
    ck_assert(proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    free(nets);
    ck_assert_int_eq(proxy_nets_parse("", &nets, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 0);
    a = addr("127.0.0.1");
    ck_assert(!proxy_nets_contain(nets, n, (struct sockaddr *)&a));
    ck_assert_int_eq(proxy_nets_parse("localhost", &nets, &n, err, sizeof err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "localhost"));
    ck_assert_int_eq(proxy_nets_parse("10.0.0.0/33", &nets, &n, err, sizeof err), SBX_EINVAL);
    ck_assert_int_eq(proxy_nets_parse("10.0.0.0/", &nets, &n, err, sizeof err), SBX_EINVAL);
}
END_TEST

/* Scans text in pieces of step bytes; returns the scanner's last result and
 * the offset where the body ended (or the length scanned). */
static int chunked(const char *text, size_t step, size_t *ret_end)
{
    proxy_chunked_t c = { 0 };
    size_t n = strlen(text), off = 0;
    while (off < n) {
        size_t k = n - off < step ? n - off : step, used = 0;
        int r = proxy_chunked_scan(&c, text + off, k, &used);
        if (r != 0) {
            *ret_end = off + used;
            return r;
        }
        ck_assert_uint_eq(used, k);
        off += k;
    }
    *ret_end = off;
    return 0;
}

START_TEST(test_chunked_body_ends_where_the_next_request_begins)
{
    static const char body[] = "5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
    static const char next[] = "GET / HTTP/1.1\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";
    char text[256];
    snprintf(text, sizeof text, "%s%s", body, next);
    for (size_t step = 1; step <= sizeof text; step++) {
        size_t end = 0;
        ck_assert_int_eq(chunked(text, step, &end), 1);
        ck_assert_uint_eq(end, sizeof body - 1);
    }
    size_t end = 0;
    ck_assert_int_eq(chunked("5\r\nhel", 3, &end), 0); /* goes on */
    ck_assert_uint_eq(end, 6);
}
END_TEST

START_TEST(test_chunked_refuses_what_it_cannot_vouch_for)
{
    static const char *const bad[] = {
        "x\r\n",                          /* not a size */
        "\r\n",                           /* no digits */
        "5\nhello\r\n",                   /* bare LF */
        "5\r\nhelloX\r\n",                /* data longer than its size */
        "1000000000000000\r\n",           /* 16 hex digits */
        "0\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n", /* a trailer field */
        "3;ext\nabc\r\n",                 /* bare LF in an extension */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t end = 0;
        ck_assert_msg(chunked(bad[i], 1, &end) == SBX_EINVAL, "accepted %s", bad[i]);
        ck_assert_msg(chunked(bad[i], 64, &end) == SBX_EINVAL, "accepted %s whole", bad[i]);
    }
}
END_TEST

/* Decodes text fed step bytes at a time; the body into out. */
static int decode(const char *text, size_t step, char *out, size_t *ret_out, size_t *ret_end)
{
    proxy_chunked_t c = { 0 };
    size_t n = strlen(text), off = 0, got = 0;
    char buf[256];
    while (off < n) {
        size_t k = n - off < step ? n - off : step, used = 0, o = 0;
        memcpy(buf, text + off, k);
        int r = proxy_chunked_decode(&c, buf, k, &used, &o);
        memcpy(out + got, buf, o);
        got += o;
        *ret_out = got;
        if (r != 0) {
            *ret_end = off + used;
            return r;
        }
        off += k;
    }
    *ret_out = got;
    return 0;
}

START_TEST(test_chunked_decode_keeps_the_data_and_drops_the_framing)
{
    const char *ok = "5\r\nhello\r\n1;ext=1\r\n \r\nb\r\n01234567890\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
    for (size_t step = 1; step <= 64; step++) {
        char out[128];
        size_t got = 0, end = 0;
        ck_assert_int_eq(decode(ok, step, out, &got, &end), 1);
        ck_assert_uint_eq(got, 17);
        ck_assert(memcmp(out, "hello 01234567890", 17) == 0);
        ck_assert_uint_eq(end, strlen(ok) - strlen("GET / HTTP/1.1\r\n"));
    }
    char out[128];
    size_t got = 0, end = 0;
    ck_assert_int_eq(decode("4\r\nabcd\r\nz\r\n", 3, out, &got, &end), SBX_EINVAL);
    ck_assert_uint_eq(got, 4);
    ck_assert_int_eq(decode("4\r\nabcdX", 100, out, &got, &end), SBX_EINVAL);
    ck_assert_int_eq(decode("6\r\nabc", 100, out, &got, &end), 0); /* goes on */
    ck_assert_uint_eq(got, 3);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("proxy");
    unit_tcase_add(s, "head", UNIT_TESTS(
        test_head_parses_request_line_and_headers,
        test_head_refuses_malformed_requests,
        test_head_bounds_the_number_of_headers,
    ));
    unit_tcase_add(s, "routes", UNIT_TESTS(
        test_route_by_path_host_and_redirect,
        test_route_refuses_what_is_not_a_route_address,
        test_port_host_names_a_sandbox_port,
        test_trusted_proxy_networks,
    ));
    unit_tcase_add(s, "chunked", UNIT_TESTS(
        test_chunked_body_ends_where_the_next_request_begins,
        test_chunked_refuses_what_it_cannot_vouch_for,
        test_chunked_decode_keeps_the_data_and_drops_the_framing,
    ));
    return s;
}
