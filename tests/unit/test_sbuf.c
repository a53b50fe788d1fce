/* Unit tests for the capped byte buffer (common/sbuf.c). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "sbuf.h"

START_TEST(test_empty_buffer_reads_as_empty_string)
{
    sbuf_t b;
    sbuf_init(&b, 16);
    ck_assert_ptr_null(b.data);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.seen, 0);
    ck_assert(!b.truncated);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_append_keeps_bytes_and_nul_terminates)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_int_eq(sbuf_append(&b, "hello", 5), 0);
    ck_assert_int_eq(sbuf_append(&b, " world", 6), 0);
    ck_assert_uint_eq(b.len, 11);
    ck_assert_uint_eq(b.seen, 11);
    ck_assert_int_eq(b.data[b.len], '\0');
    ck_assert_str_eq(sbuf_cstr(&b), "hello world");
    ck_assert(!b.truncated);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_append_zero_bytes_gives_empty_terminated_string)
{
    sbuf_t b;
    sbuf_init(&b, 4);
    ck_assert_int_eq(sbuf_append(&b, NULL, 0), 0);
    ck_assert_ptr_nonnull(b.data);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    ck_assert_uint_eq(b.len, 0);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_append_keeps_embedded_nul_bytes)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_int_eq(sbuf_append(&b, "a\0b", 3), 0);
    ck_assert_uint_eq(b.len, 3);
    ck_assert_mem_eq(b.data, "a\0b\0", 4);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_append_exactly_to_limit_succeeds)
{
    sbuf_t b;
    sbuf_init(&b, 8);
    ck_assert_int_eq(sbuf_append(&b, "1234", 4), 0);
    ck_assert_int_eq(sbuf_append(&b, "5678", 4), 0);
    ck_assert_uint_eq(b.len, 8);
    ck_assert_str_eq(sbuf_cstr(&b), "12345678");
    ck_assert(!b.truncated);
    /* Full: even one more byte is refused. */
    ck_assert_int_eq(sbuf_append(&b, "9", 1), SBX_ETOOBIG);
    ck_assert(b.truncated);
    ck_assert_uint_eq(b.len, 8);
    ck_assert_uint_eq(b.seen, 9);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_append_past_limit_is_all_or_nothing)
{
    sbuf_t b;
    sbuf_init(&b, 8);
    ck_assert_int_eq(sbuf_append(&b, "12345", 5), 0);
    ck_assert_int_eq(sbuf_append(&b, "abcd", 4), SBX_ETOOBIG);
    /* Nothing of the refused append is kept, but it is counted and flagged. */
    ck_assert_uint_eq(b.len, 5);
    ck_assert_str_eq(sbuf_cstr(&b), "12345");
    ck_assert(b.truncated);
    ck_assert_uint_eq(b.seen, 9);
    /* A later append that fits still works. */
    ck_assert_int_eq(sbuf_append(&b, "abc", 3), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "12345abc");
    ck_assert_uint_eq(b.seen, 12);
    ck_assert(b.truncated);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_append_larger_than_limit_on_empty_buffer_keeps_nothing)
{
    sbuf_t b;
    sbuf_init(&b, 3);
    ck_assert_int_eq(sbuf_append(&b, "abcd", 4), SBX_ETOOBIG);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    ck_assert_uint_eq(b.seen, 4);
    ck_assert(b.truncated);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_bounded_append_keeps_exactly_limit_bytes)
{
    sbuf_t b;
    sbuf_init(&b, 10);
    ck_assert_int_eq(sbuf_append_bounded(&b, "abcdef", 6), 0);
    ck_assert(!b.truncated);
    ck_assert_int_eq(sbuf_append_bounded(&b, "ghijklmnop", 10), 0);
    ck_assert_uint_eq(b.len, 10);
    ck_assert_str_eq(sbuf_cstr(&b), "abcdefghij");
    ck_assert(b.truncated);
    ck_assert_uint_eq(b.seen, 16);
    /* Once full, more input is only counted. */
    ck_assert_int_eq(sbuf_append_bounded(&b, "xyz", 3), 0);
    ck_assert_uint_eq(b.len, 10);
    ck_assert_str_eq(sbuf_cstr(&b), "abcdefghij");
    ck_assert_uint_eq(b.seen, 19);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_bounded_append_counts_large_input_in_seen)
{
    sbuf_t b;
    sbuf_init(&b, 100);
    char chunk[4096];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(sbuf_append_bounded(&b, chunk, sizeof chunk), 0);
    ck_assert_uint_eq(b.len, 100);
    ck_assert_uint_eq(b.seen, 4096u * 1000u);
    ck_assert(b.truncated);
    ck_assert_uint_eq(strlen(sbuf_cstr(&b)), 100);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_bounded_append_within_limit_is_not_truncated)
{
    sbuf_t b;
    sbuf_init(&b, 5);
    ck_assert_int_eq(sbuf_append_bounded(&b, "abcde", 5), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "abcde");
    ck_assert(!b.truncated);
    ck_assert_uint_eq(b.seen, 5);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_growth_across_many_appends_keeps_content)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    for (int i = 0; i < 10000; i++)
        ck_assert_int_eq(sbuf_append(&b, "0123456789", 10), 0);
    ck_assert_uint_eq(b.len, 100000);
    ck_assert_uint_ge(b.cap, b.len + 1);
    for (size_t i = 0; i < b.len; i++)
        ck_assert_int_eq(b.data[i], '0' + (int)(i % 10));
    ck_assert_int_eq(b.data[b.len], '\0');
    sbuf_release(&b);
}
END_TEST

START_TEST(test_printf_formats_small_output)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_int_eq(sbuf_printf(&b, "%s=%d", "n", 42), 0);
    ck_assert_int_eq(sbuf_printf(&b, ";%05.1f", 2.5), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "n=42;002.5");
    ck_assert_uint_eq(b.len, 10);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_printf_grows_past_small_buffer_path)
{
    char big[3000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_int_eq(sbuf_append(&b, "<", 1), 0);
    ck_assert_int_eq(sbuf_printf(&b, "%s|%d", big, 7), 0);
    ck_assert_uint_eq(b.len, 1 + 2999 + 2);
    ck_assert_int_eq(b.data[0], '<');
    ck_assert_int_eq(b.data[1], 'q');
    ck_assert_int_eq(b.data[2999], 'q');
    ck_assert_str_eq(b.data + 3000, "|7");
    sbuf_release(&b);
}
END_TEST

START_TEST(test_printf_exactly_small_buffer_size_boundary)
{
    /* 511 and 512 bytes straddle the 512-byte stack buffer. */
    char s[600];
    for (size_t n = 510; n <= 514; n++) {
        memset(s, 'a', n);
        s[n] = '\0';
        sbuf_t b;
        sbuf_init(&b, 0);
        ck_assert_int_eq(sbuf_printf(&b, "%s", s), 0);
        ck_assert_uint_eq(b.len, n);
        ck_assert_str_eq(sbuf_cstr(&b), s);
        sbuf_release(&b);
    }
}
END_TEST

START_TEST(test_printf_past_limit_is_all_or_nothing)
{
    sbuf_t b;
    sbuf_init(&b, 10);
    ck_assert_int_eq(sbuf_printf(&b, "%s", "abc"), 0);
    ck_assert_int_eq(sbuf_printf(&b, "%d", 12345678), SBX_ETOOBIG);
    ck_assert_str_eq(sbuf_cstr(&b), "abc");
    ck_assert(b.truncated);
    ck_assert_uint_eq(b.seen, 11);

    char big[2000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(sbuf_printf(&b, "%s", big), SBX_ETOOBIG);
    ck_assert_str_eq(sbuf_cstr(&b), "abc");
    ck_assert_uint_eq(b.seen, 11 + 1999);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_detach_hands_over_data_and_empties_buffer)
{
    sbuf_t b;
    sbuf_init(&b, 4);
    ck_assert_int_eq(sbuf_append(&b, "abc", 3), 0);
    ck_assert_int_eq(sbuf_append(&b, "de", 2), SBX_ETOOBIG);
    size_t len = 99;
    char *p = sbuf_detach(&b, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p, "abc");
    ck_assert_uint_eq(len, 3);
    free(p);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_uint_eq(b.seen, 0);
    ck_assert(!b.truncated);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    /* The limit survives a detach. */
    ck_assert_uint_eq(b.limit, 4);
    ck_assert_int_eq(sbuf_append(&b, "wxyz", 4), 0);
    ck_assert_int_eq(sbuf_append(&b, "!", 1), SBX_ETOOBIG);
    ck_assert_str_eq(sbuf_cstr(&b), "wxyz");
    sbuf_release(&b);
}
END_TEST

START_TEST(test_detach_of_empty_buffer_returns_allocated_empty_string)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    size_t len = 99;
    char *p = sbuf_detach(&b, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p, "");
    ck_assert_uint_eq(len, 0);
    free(p);
    /* ret_len may be NULL. */
    ck_assert_int_eq(sbuf_append(&b, "x", 1), 0);
    p = sbuf_detach(&b, NULL);
    ck_assert_str_eq(p, "x");
    free(p);
    sbuf_release(&b);
}
END_TEST

START_TEST(test_reset_empties_but_keeps_limit)
{
    sbuf_t b;
    sbuf_init(&b, 5);
    ck_assert_int_eq(sbuf_append(&b, "abcd", 4), 0);
    ck_assert_int_eq(sbuf_append(&b, "ef", 2), SBX_ETOOBIG);
    sbuf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.seen, 0);
    ck_assert(!b.truncated);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    ck_assert_uint_eq(b.limit, 5);
    ck_assert_int_eq(sbuf_append(&b, "12345", 5), 0);
    ck_assert_int_eq(sbuf_append(&b, "6", 1), SBX_ETOOBIG);
    ck_assert_str_eq(sbuf_cstr(&b), "12345");
    sbuf_release(&b);
}
END_TEST

START_TEST(test_reset_of_never_used_buffer_is_harmless)
{
    sbuf_t b;
    sbuf_init(&b, 5);
    sbuf_reset(&b);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    sbuf_release(&b);
}
END_TEST

START_TEST(test_release_frees_and_accepts_null_and_repeat)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_int_eq(sbuf_append(&b, "data", 4), 0);
    sbuf_release(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_str_eq(sbuf_cstr(&b), "");
    sbuf_release(&b); /* twice is fine */
    sbuf_release(NULL);
    /* Reusable after sbuf_init. */
    sbuf_init(&b, 2);
    ck_assert_int_eq(sbuf_append(&b, "ok", 2), 0);
    ck_assert_str_eq(sbuf_cstr(&b), "ok");
    sbuf_release(&b);
}
END_TEST

START_TEST(test_zero_limit_means_unbounded)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    ck_assert_uint_gt(b.limit, (size_t)1 << 40);
    char chunk[65536];
    memset(chunk, 'u', sizeof chunk);
    for (int i = 0; i < 32; i++)
        ck_assert_int_eq(sbuf_append(&b, chunk, sizeof chunk), 0);
    ck_assert_uint_eq(b.len, 32u * 65536u);
    ck_assert(!b.truncated);
    sbuf_release(&b);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("sbuf");
    unit_tcase_add(s, "append", UNIT_TESTS(
        test_empty_buffer_reads_as_empty_string,
        test_append_keeps_bytes_and_nul_terminates,
        test_append_zero_bytes_gives_empty_terminated_string,
        test_append_keeps_embedded_nul_bytes,
        test_append_exactly_to_limit_succeeds,
        test_append_past_limit_is_all_or_nothing,
        test_append_larger_than_limit_on_empty_buffer_keeps_nothing,
        test_growth_across_many_appends_keeps_content,
        test_zero_limit_means_unbounded,
    ));
    unit_tcase_add(s, "bounded", UNIT_TESTS(
        test_bounded_append_keeps_exactly_limit_bytes,
        test_bounded_append_counts_large_input_in_seen,
        test_bounded_append_within_limit_is_not_truncated,
    ));
    unit_tcase_add(s, "printf", UNIT_TESTS(
        test_printf_formats_small_output,
        test_printf_grows_past_small_buffer_path,
        test_printf_exactly_small_buffer_size_boundary,
        test_printf_past_limit_is_all_or_nothing,
    ));
    unit_tcase_add(s, "lifecycle", UNIT_TESTS(
        test_detach_hands_over_data_and_empties_buffer,
        test_detach_of_empty_buffer_returns_allocated_empty_string,
        test_reset_empties_but_keeps_limit,
        test_reset_of_never_used_buffer_is_harmless,
        test_release_frees_and_accepts_null_and_repeat,
    ));
    return s;
}
