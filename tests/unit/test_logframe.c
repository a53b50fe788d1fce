/* Unit tests for common/logframe: the frames of a logs connection as they
 * arrive in pieces, the UTF-8 boundary a piece may end on, and the NDJSON
 * line each piece becomes. */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "logframe.h"
#include "sbuf.h"

START_TEST(test_frame_round_trip_and_every_short_prefix_waits)
{
    unsigned char buf[64];
    logframe_header(buf, LOGFRAME_STDERR, 5);
    memcpy(buf + LOGFRAME_HEADER_BYTES, "hello", 5);
    logframe_header(buf + 10, LOGFRAME_END, 0);
    for (size_t n = 0; n < 10; n++) {
        logframe_t fr;
        ck_assert_msg(logframe_parse(buf, n, &fr) == 0, "a frame of %zu bytes out of 10 parsed", n);
    }
    logframe_t fr;
    ck_assert_int_eq(logframe_parse(buf, 15, &fr), 1);
    ck_assert_int_eq(fr.type, LOGFRAME_STDERR);
    ck_assert_uint_eq(fr.len, 5);
    ck_assert_uint_eq(fr.size, 10);
    ck_assert(memcmp(fr.data, "hello", 5) == 0);
    ck_assert_int_eq(logframe_parse(buf + fr.size, 5, &fr), 1);
    ck_assert_int_eq(fr.type, LOGFRAME_END);
    ck_assert_uint_eq(fr.len, 0);
}
END_TEST

START_TEST(test_frame_refuses_unknown_types_and_oversized_payloads)
{
    unsigned char buf[LOGFRAME_HEADER_BYTES];
    logframe_t fr;
    int bad_types[] = { 0, 4, 0x7f, 0xff };
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        logframe_header(buf, bad_types[i], 1);
        ck_assert_int_eq(logframe_parse(buf, sizeof buf, &fr), SBX_EINVAL);
    }
    logframe_header(buf, LOGFRAME_STDOUT, LOGFRAME_PAYLOAD_MAX + 1);
    ck_assert_int_eq(logframe_parse(buf, sizeof buf, &fr), SBX_EINVAL);
    logframe_header(buf, LOGFRAME_STDOUT, 0xffffffffu);
    ck_assert_int_eq(logframe_parse(buf, sizeof buf, &fr), SBX_EINVAL);
    logframe_header(buf, LOGFRAME_STDOUT, LOGFRAME_PAYLOAD_MAX);
    ck_assert_int_eq(logframe_parse(buf, sizeof buf, &fr), 0); /* legal, waits for its payload */
}
END_TEST

START_TEST(test_utf8_prefix_holds_back_only_unfinished_sequences)
{
    const char *euro = "\xe2\x82\xac";     /* 3 bytes */
    const char *emoji = "\xf0\x9f\x98\x80"; /* 4 bytes */
    char s[16];
    ck_assert_uint_eq(logframe_utf8_prefix("abc", 3), 3);
    ck_assert_uint_eq(logframe_utf8_prefix("", 0), 0);
    snprintf(s, sizeof s, "a%s", euro);
    ck_assert_uint_eq(logframe_utf8_prefix(s, 4), 4);
    ck_assert_uint_eq(logframe_utf8_prefix(s, 3), 1);
    ck_assert_uint_eq(logframe_utf8_prefix(s, 2), 1);
    snprintf(s, sizeof s, "%s", emoji);
    for (size_t n = 1; n < 4; n++)
        ck_assert_uint_eq(logframe_utf8_prefix(s, n), 0);
    ck_assert_uint_eq(logframe_utf8_prefix(s, 4), 4);
    /* Invalid bytes cannot be mended by more: they go now. */
    ck_assert_uint_eq(logframe_utf8_prefix("a\x80", 2), 2);
    ck_assert_uint_eq(logframe_utf8_prefix("a\xff", 2), 2);
    ck_assert_uint_eq(logframe_utf8_prefix("\x80\x80\x80\x80", 4), 4);
}
END_TEST

START_TEST(test_ndjson_chunk_escapes_and_repairs)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_int_eq(logframe_ndjson_chunk(&b, "stdout", "hi \"x\"\n\t/", 9), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "{\"stream\":\"stdout\",\"data\":\"hi \\\"x\\\"\\n\\t/\"}\n");
    sbuf_reset(&b);
    ck_assert_int_eq(logframe_ndjson_chunk(&b, "stderr", "a\xff" "b\0c", 5), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "{\"stream\":\"stderr\",\"data\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\"}\n");
    sbuf_reset(&b);
    ck_assert_int_eq(logframe_ndjson_chunk(&b, "output", "\x01", 1), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "{\"stream\":\"output\",\"data\":\"\\u0001\"}\n");
    sbuf_release(&b);
    sbuf_init(&b, 8);
    ck_assert_int_eq(logframe_ndjson_chunk(&b, "stdout", "too long for the limit", 22), SBX_ETOOBIG);
    sbuf_release(&b);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("logframe");
    unit_tcase_add(s, "frames", UNIT_TESTS(
        test_frame_round_trip_and_every_short_prefix_waits,
        test_frame_refuses_unknown_types_and_oversized_payloads,
        test_utf8_prefix_holds_back_only_unfinished_sequences,
        test_ndjson_chunk_escapes_and_repairs,
    ));
    return s;
}
