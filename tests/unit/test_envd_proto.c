/* Unit tests for the pure parts of the worker's envd (worker/envd.h): the
 * controller's request line, query strings, Connect envelopes and errors,
 * proto3-JSON times and permissions, paths, and multipart bodies in
 * pieces of any size. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "envd.h"
#include "errors.h"

#define LINE_OK "{\"op\":\"envd\",\"method\":\"POST\",\"path\":\"/process.Process/Start\"," \
                "\"query\":\"path=%2Fa&username=user\",\"headers\":{\"content-type\":\"application/connect+json\"," \
                "\"connect-timeout-ms\":\"60000\"},\"body\":112,\"max_bytes\":1048576}"

START_TEST(test_request_line_is_parsed_with_its_headers)
{
    envd_req_t q;
    char why[200];
    ck_assert_int_eq(envd_request_parse(LINE_OK, strlen(LINE_OK), &q, why, sizeof why), 0);
    ck_assert_str_eq(q.method, "POST");
    ck_assert_str_eq(q.path, "/process.Process/Start");
    ck_assert_str_eq(q.query, "path=%2Fa&username=user");
    ck_assert_uint_eq(q.nheaders, 2);
    ck_assert_str_eq(envd_req_header(&q, "connect-timeout-ms"), "60000");
    ck_assert_ptr_null(envd_req_header(&q, "authorization"));
    ck_assert_int_eq(q.body, 112);
    ck_assert_int_eq(q.max_bytes, 1048576);
    ck_assert_str_eq(q.caller, "");
    ck_assert_str_eq(q.tenant, "");
    envd_req_release(&q);
    static const char with_caller[] = "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\","
                                      "\"headers\":{},\"body\":0,\"max_bytes\":1,\"caller\":\"tok_0123abc\","
                                      "\"tenant\":\"ten_Acme_1\"}";
    ck_assert_int_eq(envd_request_parse(with_caller, strlen(with_caller), &q, why, sizeof why), 0);
    ck_assert_str_eq(q.caller, "tok_0123abc");
    ck_assert_str_eq(q.tenant, "ten_Acme_1");
    envd_req_release(&q);
}
END_TEST

START_TEST(test_request_lines_are_refused_strictly)
{
    static const struct {
        const char *line, *want;
    } bad[] = {
        { "[]", "one JSON object" },
        { "{\"op\":\"shell\"}", "op must be" },
        { "{\"op\":\"envd\",\"method\":\"PATCH\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1}",
          "method" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1}",
          "path" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/files?path=/a\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1}",
          "path" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{\"Content-Type\":\"x\"},\"body\":0,\"max_bytes\":1}",
          "lower-case" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{\"a\":1},\"body\":0,\"max_bytes\":1}",
          "lower-case" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":-2,\"max_bytes\":1}",
          "body" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":0}",
          "max_bytes" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1,\"x\":1}",
          "\"x\"" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"headers\":{},\"body\":0,\"max_bytes\":1}",
          "must say" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1,"
          "\"caller\":\"tok x\"}", "token id" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1,"
          "\"tenant\":\"\"}", "tenant id" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1,"
          "\"tenant\":\"ten-1\"}", "tenant id" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1,"
          "\"tenant\":7}", "tenant id" },
        { "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\",\"headers\":{},\"body\":0,\"max_bytes\":1,"
          "\"tenant\":\"a0123456789012345678901234567890123456789012345678901234567890123\"}", "tenant id" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        envd_req_t q;
        char why[200] = "";
        ck_assert_msg(envd_request_parse(bad[i].line, strlen(bad[i].line), &q, why, sizeof why) == SBX_EINVAL,
                      "accepted %s", bad[i].line);
        ck_assert_msg(strstr(why, bad[i].want), "%s: %s", bad[i].line, why);
    }
    /* 17 headers: one too many. */
    char line[2048];
    size_t n = (size_t)snprintf(line, sizeof line, "{\"op\":\"envd\",\"method\":\"GET\",\"path\":\"/health\",\"query\":\"\","
                                "\"body\":0,\"max_bytes\":1,\"headers\":{");
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s\"h%d\":\"v\"", i ? "," : "", i);
    snprintf(line + n, sizeof line - n, "}}");
    envd_req_t q;
    char why[200];
    ck_assert_int_eq(envd_request_parse(line, strlen(line), &q, why, sizeof why), SBX_EINVAL);
}
END_TEST

START_TEST(test_query_params_are_decoded)
{
    char out[64];
    ck_assert_int_eq(envd_query_param("path=%2Ftmp%2Fa+b.txt&username=root", "path", out, sizeof out), 1);
    ck_assert_str_eq(out, "/tmp/a b.txt");
    ck_assert_int_eq(envd_query_param("path=%2Ftmp&username=root", "username", out, sizeof out), 1);
    ck_assert_str_eq(out, "root");
    ck_assert_int_eq(envd_query_param("username=root", "path", out, sizeof out), 0);
    ck_assert_int_eq(envd_query_param("", "path", out, sizeof out), 0);
    ck_assert_int_eq(envd_query_param("flag&path=x", "flag", out, sizeof out), 1);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(envd_query_param("path=%2", "path", out, sizeof out), SBX_EINVAL);
    ck_assert_int_eq(envd_query_param("path=%zz", "path", out, sizeof out), SBX_EINVAL);
    ck_assert_int_eq(envd_query_param("path=a%0Ab", "path", out, sizeof out), SBX_EINVAL);
    ck_assert_int_eq(envd_query_param("path=abcdef", "path", out, 4), SBX_EINVAL);
}
END_TEST

START_TEST(test_envelopes_are_one_uncompressed_message)
{
    char body[64];
    const char *m = NULL;
    size_t ml = 0;
    char why[200];
    envd_envelope_header((unsigned char *)body, 0, 2);
    memcpy(body + 5, "{}", 2);
    ck_assert_int_eq(envd_envelope_one(body, 7, &m, &ml, why, sizeof why), 0);
    ck_assert_uint_eq(ml, 2);
    ck_assert(memcmp(m, "{}", 2) == 0);
    ck_assert_int_eq(envd_envelope_one(body, 8, &m, &ml, why, sizeof why), SBX_EINVAL);  /* trailing byte */
    ck_assert_int_eq(envd_envelope_one(body, 4, &m, &ml, why, sizeof why), SBX_EINVAL);  /* short header */
    body[0] = ENVD_FLAG_COMPRESSED;
    ck_assert_int_eq(envd_envelope_one(body, 7, &m, &ml, why, sizeof why), SBX_EINVAL);
    ck_assert(strstr(why, "compressed"));
    body[0] = ENVD_FLAG_END_STREAM;
    ck_assert_int_eq(envd_envelope_one(body, 7, &m, &ml, why, sizeof why), SBX_EINVAL);
    unsigned char h[ENVD_ENVELOPE_HEADER];
    envd_envelope_header(h, 2, 0x01020304);
    ck_assert(h[0] == 2 && h[1] == 1 && h[2] == 2 && h[3] == 3 && h[4] == 4);
}
END_TEST

START_TEST(test_connect_errors_have_their_status_and_shape)
{
    ck_assert_int_eq(envd_connect_http_status("not_found"), 404);
    ck_assert_int_eq(envd_connect_http_status("already_exists"), 409);
    ck_assert_int_eq(envd_connect_http_status("unimplemented"), 501);
    ck_assert_int_eq(envd_connect_http_status("resource_exhausted"), 429);
    ck_assert_int_eq(envd_connect_http_status("no_such_code"), 500);
    char *s = envd_connect_error_json("not_found", "process with pid 9 not found", false);
    ck_assert_str_eq(s, "{\"code\":\"not_found\",\"message\":\"process with pid 9 not found\"}");
    free(s);
    s = envd_connect_error_json("unavailable", "x", true);
    ck_assert_str_eq(s, "{\"error\":{\"code\":\"unavailable\",\"message\":\"x\"}}");
    free(s);
    s = envd_connect_error_json(NULL, NULL, true);
    ck_assert_str_eq(s, "{}");
    free(s);
}
END_TEST

START_TEST(test_timestamps_become_utc_rfc3339)
{
    char out[48];
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-02T03:04:05Z", out, sizeof out), 0);
    ck_assert_str_eq(out, "2020-01-02T03:04:05Z");
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-02T03:04:05.123456789+02:00", out, sizeof out), 0);
    ck_assert_str_eq(out, "2020-01-02T01:04:05.123456789Z");
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-01T00:30:00.5-01:00", out, sizeof out), 0);
    ck_assert_str_eq(out, "2020-01-01T01:30:00.500Z");
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-02T03:04:05.1234Z", out, sizeof out), 0);
    ck_assert_str_eq(out, "2020-01-02T03:04:05.123400Z");
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-02 03:04:05Z", out, sizeof out), SBX_EINVAL);
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-02T03:04:05", out, sizeof out), SBX_EINVAL);
    ck_assert_int_eq(envd_timestamp_normalize("2020-13-02T03:04:05Z", out, sizeof out), SBX_EINVAL);
    ck_assert_int_eq(envd_timestamp_normalize("2020-01-02T03:04:05.Z", out, sizeof out), SBX_EINVAL);
}
END_TEST

START_TEST(test_permissions_and_paths)
{
    char p[16];
    envd_permissions("file", 0644, p, sizeof p);
    ck_assert_str_eq(p, "-rw-r--r--");
    envd_permissions("dir", 0755, p, sizeof p);
    ck_assert_str_eq(p, "drwxr-xr-x");
    envd_permissions("symlink", 0777, p, sizeof p);
    ck_assert_str_eq(p, "Lrwxrwxrwx");
    envd_permissions("dir", 01777, p, sizeof p);
    ck_assert_str_eq(p, "dtrwxrwxrwx");
    envd_permissions("file", 04755, p, sizeof p);
    ck_assert_str_eq(p, "urwxr-xr-x");
    char out[SBX_FILES_PATH_MAX + 1];
    ck_assert_int_eq(envd_path_resolve("rel/b.bin", out), 0);
    ck_assert_str_eq(out, "/rel/b.bin");
    ck_assert_int_eq(envd_path_resolve("/tmp/../etc//x/", out), 0);
    ck_assert_str_eq(out, "/etc/x");
    ck_assert_int_eq(envd_path_resolve("", out), SBX_EINVAL);
    ck_assert_int_eq(envd_path_resolve("/a\nb", out), SBX_EINVAL);
}
END_TEST

/* ---- multipart ---------------------------------------------------------- */

#define BOUNDARY "----formdata-undici-079008246993"

typedef struct mp_rec {
    char log[4096];           /* "B name filename|" per part, its data, "E|" */
    size_t len;
    int fail_at_part;         /* part_begin returns an error for this part (1-based); 0 never */
    int parts;
} mp_rec_t;

static void rec_add(mp_rec_t *r, const char *p, size_t n)
{
    ck_assert_uint_lt(r->len + n, sizeof r->log);
    memcpy(r->log + r->len, p, n);
    r->len += n;
    r->log[r->len] = '\0';
}

static int rec_begin(void *ud, const char *name, const char *filename)
{
    mp_rec_t *r = ud;
    char s[600];
    snprintf(s, sizeof s, "B %s %s|", name, filename);
    rec_add(r, s, strlen(s));
    return ++r->parts == r->fail_at_part ? -42 : 0;
}

static int rec_data(void *ud, const char *p, size_t n)
{
    rec_add(ud, p, n);
    return 0;
}

static int rec_end(void *ud)
{
    rec_add(ud, "E|", 2);
    return 0;
}

static const envd_mp_callbacks_t rec_cb = { rec_begin, rec_data, rec_end };

/* A body whose content holds things that look like a delimiter but are not. */
static const char MP_BODY[] =
    "--" BOUNDARY "\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "AAA\r\n--" "----formdata-undici-07900\r\r\n-x"
    "\r\n--" BOUNDARY "\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"rel/b \\\"q\\\".bin\"\r\n"
    "\r\n"
    "\x00\x01\x02\xff"
    "\r\n--" BOUNDARY "--\r\n"
    "epilogue ignored";

static const char MP_WANT[] = "B file /tmp/a.txt|AAA\r\n------formdata-undici-07900\r\r\n-xE|"
                              "B file rel/b \"q\".bin|\x00\x01\x02\xff" "E|";

static void mp_run(const size_t *cuts, size_t ncuts, mp_rec_t *r)
{
    envd_mp_t m;
    memset(r, 0, sizeof *r);
    ck_assert_int_eq(envd_mp_init(&m, BOUNDARY, &rec_cb, r), 0);
    size_t n = sizeof MP_BODY - 1, off = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        ck_assert_int_eq(envd_mp_push(&m, MP_BODY + off, end - off), 0);
        off = end;
    }
    ck_assert_int_eq(envd_mp_finish(&m), 0);
    envd_mp_release(&m);
}

START_TEST(test_multipart_parts_come_whole_however_the_body_is_cut)
{
    mp_rec_t r;
    size_t want_len = sizeof MP_WANT - 1, n = sizeof MP_BODY - 1;
    mp_run(NULL, 0, &r);
    ck_assert_uint_eq(r.len, want_len);
    ck_assert(memcmp(r.log, MP_WANT, want_len) == 0);
    for (size_t a = 1; a < n; a++) {
        for (size_t b = a; b < n; b += 7) {
            size_t cuts[2] = { a, b };
            mp_run(cuts, 2, &r);
            ck_assert_msg(r.len == want_len && memcmp(r.log, MP_WANT, want_len) == 0, "cut at %zu and %zu", a, b);
        }
    }
    /* byte by byte */
    size_t *cuts = unit_xmalloc(n * sizeof *cuts);
    for (size_t i = 0; i < n - 1; i++)
        cuts[i] = i + 1;
    mp_run(cuts, n - 1, &r);
    ck_assert(r.len == want_len && memcmp(r.log, MP_WANT, want_len) == 0);
    free(cuts);
}
END_TEST

START_TEST(test_multipart_refuses_what_is_malformed)
{
    mp_rec_t r;
    envd_mp_t m;
    /* no closing delimiter */
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(envd_mp_init(&m, BOUNDARY, &rec_cb, &r), 0);
    static const char cut[] = "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nAB";
    ck_assert_int_eq(envd_mp_push(&m, cut, sizeof cut - 1), 0);
    ck_assert_int_eq(envd_mp_finish(&m), SBX_EINVAL);
    ck_assert(strstr(m.error, "closing"));
    envd_mp_release(&m);
    /* a delimiter followed by junk */
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(envd_mp_init(&m, BOUNDARY, &rec_cb, &r), 0);
    static const char junk[] = "--" BOUNDARY "xx\r\n";
    ck_assert_int_eq(envd_mp_push(&m, junk, sizeof junk - 1), SBX_EINVAL);
    envd_mp_release(&m);
    /* headers past the bound */
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(envd_mp_init(&m, BOUNDARY, &rec_cb, &r), 0);
    static const char head[] = "--" BOUNDARY "\r\nX-A: ";
    ck_assert_int_eq(envd_mp_push(&m, head, sizeof head - 1), 0);
    char *big = unit_repeat('a', ENVD_MP_HEADERS_MAX);
    ck_assert_int_eq(envd_mp_push(&m, big, strlen(big)), SBX_EINVAL);
    ck_assert(strstr(m.error, "8192"));
    free(big);
    envd_mp_release(&m);
    /* a filename past a path's length is refused, never cut */
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(envd_mp_init(&m, BOUNDARY, &rec_cb, &r), 0);
    char *name = unit_repeat('n', SBX_FILES_PATH_MAX + 1);
    char *part = unit_xmalloc(SBX_FILES_PATH_MAX + 256);
    int pn = snprintf(part, SBX_FILES_PATH_MAX + 256, "--" BOUNDARY "\r\nContent-Disposition: form-data; "
                      "name=\"file\"; filename=\"%s\"\r\n\r\n", name);
    ck_assert_int_eq(envd_mp_push(&m, part, (size_t)pn), SBX_EINVAL);
    ck_assert_msg(strstr(m.error, "too long"), "%s", m.error);
    ck_assert_uint_eq(r.parts, 0);
    free(name);
    free(part);
    envd_mp_release(&m);
    /* a callback's refusal stops the parser with its value */
    memset(&r, 0, sizeof r);
    r.fail_at_part = 2;
    ck_assert_int_eq(envd_mp_init(&m, BOUNDARY, &rec_cb, &r), 0);
    ck_assert_int_eq(envd_mp_push(&m, MP_BODY, sizeof MP_BODY - 1), -42);
    envd_mp_release(&m);
}
END_TEST

START_TEST(test_multipart_boundary_from_the_content_type)
{
    char b[ENVD_MP_BOUNDARY_MAX + 1];
    ck_assert_int_eq(envd_mp_boundary("multipart/form-data; boundary=" BOUNDARY, b, sizeof b), 0);
    ck_assert_str_eq(b, BOUNDARY);
    ck_assert_int_eq(envd_mp_boundary("Multipart/Form-Data; charset=x; boundary=\"a b:c\"", b, sizeof b), 0);
    ck_assert_str_eq(b, "a b:c");
    ck_assert_int_eq(envd_mp_boundary("multipart/form-data", b, sizeof b), SBX_EINVAL);
    ck_assert_int_eq(envd_mp_boundary("application/octet-stream; boundary=x", b, sizeof b), SBX_EINVAL);
    ck_assert_int_eq(envd_mp_boundary("multipart/form-data; boundary=\"unterminated", b, sizeof b), SBX_EINVAL);
    char *longb = unit_repeat('x', ENVD_MP_BOUNDARY_MAX + 1);
    char ct[200];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", longb);
    ck_assert_int_eq(envd_mp_boundary(ct, b, sizeof b), SBX_EINVAL);
    free(longb);
    envd_mp_t m;
    mp_rec_t r;
    ck_assert_int_eq(envd_mp_init(&m, "bad\rboundary", &rec_cb, &r), SBX_EINVAL);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("envd_proto");
    unit_tcase_add(s, "request", UNIT_TESTS(test_request_line_is_parsed_with_its_headers,
                                            test_request_lines_are_refused_strictly, test_query_params_are_decoded, ));
    unit_tcase_add(s, "connect", UNIT_TESTS(test_envelopes_are_one_uncompressed_message,
                                            test_connect_errors_have_their_status_and_shape, ));
    unit_tcase_add(s, "proto3", UNIT_TESTS(test_timestamps_become_utc_rfc3339, test_permissions_and_paths, ));
    unit_tcase_add(s, "multipart", UNIT_TESTS(test_multipart_parts_come_whole_however_the_body_is_cut,
                                              test_multipart_refuses_what_is_malformed,
                                              test_multipart_boundary_from_the_content_type, ));
    return s;
}
