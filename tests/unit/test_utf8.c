/* Unit tests for UTF-8 validation and repair (common/utf8.c). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define REPL "\xEF\xBF\xBD" /* U+FFFD */

/* Validates the literal's bytes (without its terminating NUL). */
#define VALID(lit) utf8_valid((lit), sizeof(lit) - 1)

/* Sanitises the literal and compares with the expected output; the output
 * must itself be valid UTF-8. */
static void check_sanitize(const char *in, size_t n, const char *want)
{
    char *out = utf8_sanitize(in, n);
    ck_assert_ptr_nonnull(out);
    ck_assert_str_eq(out, want);
    ck_assert(utf8_valid(out, strlen(out)));
    free(out);
}
#define SANITIZE(lit, want) check_sanitize((lit), sizeof(lit) - 1, (want))

START_TEST(test_ascii_is_valid)
{
    ck_assert(VALID("hello, world\n\t~"));
    ck_assert(VALID(""));
    ck_assert(utf8_valid(NULL, 0));
}
END_TEST

START_TEST(test_multibyte_sequences_are_valid)
{
    ck_assert(VALID("\xC2\x80"));             /* U+0080, smallest 2-byte */
    ck_assert(VALID("\xC3\xA9t\xC3\xA9"));     /* "été" */
    ck_assert(VALID("\xDF\xBF"));             /* U+07FF */
    ck_assert(VALID("\xE0\xA0\x80"));         /* U+0800, smallest 3-byte */
    ck_assert(VALID("\xE2\x82\xAC"));         /* U+20AC euro */
    ck_assert(VALID("\xED\x9F\xBF"));         /* U+D7FF, just below surrogates */
    ck_assert(VALID("\xEE\x80\x80"));         /* U+E000, just above surrogates */
    ck_assert(VALID("\xEF\xBF\xBD"));         /* U+FFFD */
    ck_assert(VALID("\xF0\x90\x80\x80"));     /* U+10000, smallest 4-byte */
    ck_assert(VALID("\xF0\x9F\x98\x80"));     /* U+1F600 */
    ck_assert(VALID("\xF4\x8F\xBF\xBF"));     /* U+10FFFF, the largest */
}
END_TEST

START_TEST(test_nul_byte_is_valid_utf8)
{
    ck_assert(VALID("a\0b"));
}
END_TEST

START_TEST(test_invalid_continuation_is_rejected)
{
    ck_assert(!VALID("\x80"));                /* lone continuation */
    ck_assert(!VALID("a\xBF" "b"));
    ck_assert(!VALID("\xC3" "A"));            /* lead then ASCII */
    ck_assert(!VALID("\xE2\x82" "A"));
    ck_assert(!VALID("\xE2\x28\xA1"));
    ck_assert(!VALID("\xF0\x9F\x98" "A"));
    ck_assert(!VALID("\xC3\xC3\xA9"));        /* lead then lead */
}
END_TEST

START_TEST(test_overlong_encodings_are_rejected)
{
    ck_assert(!VALID("\xC0\x80"));            /* overlong NUL */
    ck_assert(!VALID("\xC0\xAF"));            /* overlong '/' */
    ck_assert(!VALID("\xC1\xBF"));
    ck_assert(!VALID("\xE0\x80\x80"));
    ck_assert(!VALID("\xE0\x80\xAF"));        /* overlong '/' */
    ck_assert(!VALID("\xE0\x9F\xBF"));        /* U+07FF in 3 bytes */
    ck_assert(!VALID("\xF0\x80\x80\x80"));
    ck_assert(!VALID("\xF0\x8F\xBF\xBF"));    /* U+FFFF in 4 bytes */
}
END_TEST

START_TEST(test_surrogates_are_rejected)
{
    ck_assert(!VALID("\xED\xA0\x80"));        /* U+D800 */
    ck_assert(!VALID("\xED\xAD\xBF"));        /* U+DB7F */
    ck_assert(!VALID("\xED\xB0\x80"));        /* U+DC00 */
    ck_assert(!VALID("\xED\xBF\xBF"));        /* U+DFFF */
    ck_assert(!VALID("\xED\xA0\xBD\xED\xB8\x80")); /* CESU-8 pair */
}
END_TEST

START_TEST(test_code_points_above_10ffff_are_rejected)
{
    ck_assert(!VALID("\xF4\x90\x80\x80"));    /* U+110000 */
    ck_assert(!VALID("\xF5\x80\x80\x80"));
    ck_assert(!VALID("\xF7\xBF\xBF\xBF"));
    ck_assert(!VALID("\xF8\x88\x80\x80\x80")); /* old 5-byte form */
    ck_assert(!VALID("\xFC\x84\x80\x80\x80\x80"));
    ck_assert(!VALID("\xFE"));
    ck_assert(!VALID("\xFF"));
}
END_TEST

START_TEST(test_truncated_sequence_at_end_is_rejected)
{
    ck_assert(!VALID("ok\xC3"));
    ck_assert(!VALID("ok\xE2\x82"));
    ck_assert(!VALID("ok\xF0\x9F\x98"));
    /* A complete sequence cut by n is invalid too. */
    ck_assert(!utf8_valid("\xE2\x82\xAC", 2));
    ck_assert(utf8_valid("\xE2\x82\xAC", 3));
}
END_TEST

START_TEST(test_sanitize_keeps_valid_text_unchanged)
{
    SANITIZE("plain ascii", "plain ascii");
    SANITIZE("\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
    SANITIZE("", "");
}
END_TEST

START_TEST(test_sanitize_replaces_nul_bytes)
{
    SANITIZE("a\0b", "a" REPL "b");
    SANITIZE("\0\0", REPL REPL);
}
END_TEST

START_TEST(test_sanitize_replaces_invalid_bytes_one_for_one)
{
    SANITIZE("a\x80z", "a" REPL "z");
    SANITIZE("\xFF\xFE", REPL REPL);
    SANITIZE("\xC0\x80", REPL REPL);                 /* overlong */
    SANITIZE("\xED\xA0\x80", REPL REPL REPL);        /* surrogate */
    SANITIZE("\xF4\x90\x80\x80", REPL REPL REPL REPL); /* > U+10FFFF */
    SANITIZE("\xE2\x28\xA1", REPL "(" REPL);
}
END_TEST

START_TEST(test_sanitize_replaces_truncated_tail)
{
    SANITIZE("ok\xE2\x82", "ok" REPL REPL);
    SANITIZE("ok\xF0\x9F\x98", "ok" REPL REPL REPL);
    /* Valid text resumes right after the bad byte. */
    SANITIZE("\xC3" "\xC3\xA9", REPL "\xC3\xA9");
}
END_TEST

START_TEST(test_sanitize_output_is_valid_for_every_byte_value)
{
    unsigned char all[256 * 3];
    for (int i = 0; i < 256; i++) {
        all[i * 3] = (unsigned char)i;
        all[i * 3 + 1] = (unsigned char)(0x80 + (i & 0x3F));
        all[i * 3 + 2] = (unsigned char)(255 - i);
    }
    char *out = utf8_sanitize((const char *)all, sizeof all);
    ck_assert_ptr_nonnull(out);
    size_t len = strlen(out);
    ck_assert(utf8_valid(out, len));
    ck_assert_uint_le(len, sizeof all * 3);
    ck_assert_ptr_null(memchr(out, '\0', len));
    free(out);
}
END_TEST

START_TEST(test_has_control_finds_ascii_controls_only)
{
    ck_assert(!utf8_has_control(""));
    ck_assert(!utf8_has_control("sbt_abc http://x:1/p?q=1 ~"));
    ck_assert(!utf8_has_control("caf\xc3\xa9"));
    ck_assert(utf8_has_control("a\nb"));
    ck_assert(utf8_has_control("\x1b[2J"));
    ck_assert(utf8_has_control("tab\there"));
    ck_assert(utf8_has_control("del\x7f"));
}
END_TEST

START_TEST(test_sanitize_worst_case_triples_length)
{
    char in[100];
    memset(in, 0x80, sizeof in);
    char *out = utf8_sanitize(in, sizeof in);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(strlen(out), 300);
    for (size_t i = 0; i < 300; i += 3)
        ck_assert_mem_eq(out + i, REPL, 3);
    free(out);
}
END_TEST

START_TEST(test_tail_keeps_the_end_within_max)
{
    char *t = utf8_tail("hello world", 11, 5);
    ck_assert_str_eq(t, "world");
    free(t);
    t = utf8_tail("short", 5, 100);
    ck_assert_str_eq(t, "short");
    free(t);
}
END_TEST

START_TEST(test_tail_never_starts_inside_a_character)
{
    /* A 2-byte window of "a\xC3\xA9b" starts inside the two-byte character: it is left out. */
    char *t = utf8_tail("a\xC3\xA9" "b", 4, 2);
    ck_assert_str_eq(t, "b");
    free(t);
    t = utf8_tail("a\xC3\xA9" "b", 4, 3);
    ck_assert_str_eq(t, "\xC3\xA9" "b");
    free(t);
}
END_TEST

START_TEST(test_tail_repairs_and_stays_within_max)
{
    /* Four bad bytes become 12 bytes of U+FFFD: the result is cut again. */
    char *t = utf8_tail("\xFF\xFF\xFF\xFFz", 5, 5);
    ck_assert(strlen(t) <= 5);
    ck_assert(utf8_valid(t, strlen(t)));
    ck_assert_str_eq(t, REPL "z");
    free(t);
    /* NUL bytes never survive: the tail goes into PostgreSQL text. */
    t = utf8_tail("a\0b", 3, 8);
    ck_assert_str_eq(t, "a" REPL "b");
    free(t);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("utf8");
    unit_tcase_add(s, "valid", UNIT_TESTS(
        test_ascii_is_valid,
        test_multibyte_sequences_are_valid,
        test_nul_byte_is_valid_utf8,
        test_invalid_continuation_is_rejected,
        test_overlong_encodings_are_rejected,
        test_surrogates_are_rejected,
        test_code_points_above_10ffff_are_rejected,
        test_truncated_sequence_at_end_is_rejected,
    ));
    unit_tcase_add(s, "sanitize", UNIT_TESTS(
        test_sanitize_keeps_valid_text_unchanged,
        test_sanitize_replaces_nul_bytes,
        test_sanitize_replaces_invalid_bytes_one_for_one,
        test_sanitize_replaces_truncated_tail,
        test_sanitize_output_is_valid_for_every_byte_value,
        test_sanitize_worst_case_triples_length,
        test_has_control_finds_ascii_controls_only,
        test_tail_keeps_the_end_within_max,
        test_tail_never_starts_inside_a_character,
        test_tail_repairs_and_stays_within_max,
    ));
    return s;
}
