/* Unit tests for the bounded base64 of bytes in JSON (common/b64.c). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "errors.h"
#include "jsonx.h"

START_TEST(test_b64_round_trips_every_byte)
{
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    for (size_t n = 0; n <= sizeof all; n += 37) {
        char *enc = b64_encode(all, n);
        ck_assert_ptr_nonnull(enc);
        ck_assert_uint_eq(strlen(enc), b64_encoded_len(n));
        char *dec = NULL;
        size_t len = 99;
        ck_assert_int_eq(b64_decode(enc, strlen(enc), n, &dec, &len), 0);
        ck_assert_uint_eq(len, n);
        ck_assert_mem_eq(dec, all, n);
        ck_assert_int_eq(dec[n], '\0');
        free(dec);
        free(enc);
    }
}
END_TEST

START_TEST(test_b64_refuses_what_is_not_padded_standard_base64)
{
    static const char *const bad[] = { "YQ", "YQ=", "Y*==", "YQ==\n", " YQ==", "YQ==YQ", "-_8=", NULL };
    for (int i = 0; bad[i]; i++) {
        char *dec = NULL;
        size_t len = 0;
        ck_assert_msg(b64_decode(bad[i], strlen(bad[i]), 100, &dec, &len) == SBX_EINVAL, "accepted [%s]", bad[i]);
        ck_assert_ptr_null(dec);
    }
}
END_TEST

START_TEST(test_b64_bound_is_on_the_decoded_bytes)
{
    char *dec = NULL;
    size_t len = 0;
    /* "YWJj" is 3 bytes, "YWI=" 2. */
    ck_assert_int_eq(b64_decode("YWJj", 4, 2, &dec, &len), SBX_ETOOBIG);
    ck_assert_int_eq(b64_decode("YWI=", 4, 2, &dec, &len), 0);
    ck_assert_uint_eq(len, 2);
    free(dec);
    ck_assert_int_eq(b64_decode("YWJjYWJjYWJj", 12, 2, &dec, &len), SBX_ETOOBIG);
}
END_TEST

START_TEST(test_b64_text_exact_only_for_nul_free_utf8)
{
    ck_assert(b64_text_exact("", 0));
    ck_assert(b64_text_exact("h\xc3\xa9llo", 6));
    ck_assert(!b64_text_exact("a\0b", 3));
    ck_assert(!b64_text_exact("\xff", 1));
    ck_assert(!b64_text_exact("\xc3", 1)); /* a character cut in half */
}
END_TEST

START_TEST(test_b64_json_add_bytes_adds_base64_only_when_needed)
{
    json_object *o = json_object_new_object();
    ck_assert_int_eq(b64_json_add_bytes(o, "data", "text\n", 5), 0);
    ck_assert_str_eq(jsonx_get_str(o, "data"), "text\n");
    ck_assert(!json_object_object_get_ex(o, "data_b64", NULL));
    ck_assert_int_eq(b64_json_add_bytes(o, "bin", "a\0b\xff", 4), 0);
    ck_assert_str_eq(jsonx_get_str(o, "bin"), "a\xef\xbf\xbd" "b\xef\xbf\xbd");
    ck_assert_str_eq(jsonx_get_str(o, "bin_b64"), "YQBi/w==");
    json_object_put(o);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("b64");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_b64_round_trips_every_byte,
        test_b64_refuses_what_is_not_padded_standard_base64,
        test_b64_bound_is_on_the_decoded_bytes,
        test_b64_text_exact_only_for_nul_free_utf8,
        test_b64_json_add_bytes_adds_base64_only_when_needed,
    ));
    return s;
}
