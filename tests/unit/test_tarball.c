/* Unit tests for worker/tarball: the one-directory ustar archive the probe
 * image is imported from. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "docker/tarball.h"

/* The header checksum recomputed the way tar readers do. */
static unsigned header_sum(const unsigned char *h)
{
    unsigned sum = 0;
    for (size_t i = 0; i < TARBALL_BLOCK_BYTES; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return sum;
}

START_TEST(test_directory_header_is_valid_ustar)
{
    unsigned char t[TARBALL_DIR_BYTES];
    ck_assert_int_eq(tarball_dir("probe", t), 0);
    ck_assert_str_eq((const char *)t, "probe/");
    ck_assert_int_eq(t[156], '5');
    ck_assert_mem_eq(t + 257, "ustar\0" "00", 8);
    ck_assert_mem_eq(t + 100, "0000755", 8);
    ck_assert_mem_eq(t + 124, "00000000000", 12);
    char chk[8];
    memcpy(chk, t + 148, 6);
    chk[6] = '\0';
    ck_assert_uint_eq(strtoul(chk, NULL, 8), header_sum(t));
    ck_assert_int_eq(t[154], '\0');
    ck_assert_int_eq(t[155], ' ');
    /* two zero blocks end the archive */
    for (size_t i = TARBALL_BLOCK_BYTES; i < TARBALL_DIR_BYTES; i++)
        ck_assert_int_eq(t[i], 0);
}
END_TEST

START_TEST(test_trailing_slash_is_not_doubled)
{
    unsigned char t[TARBALL_DIR_BYTES];
    ck_assert_int_eq(tarball_dir("a/b/", t), 0);
    ck_assert_str_eq((const char *)t, "a/b/");
}
END_TEST

START_TEST(test_bad_names_are_refused)
{
    unsigned char t[TARBALL_DIR_BYTES];
    char long_name[100];
    memset(long_name, 'a', 99);
    long_name[99] = '\0';
    ck_assert_int_eq(tarball_dir("", t), SBX_EINVAL);
    ck_assert_int_eq(tarball_dir(NULL, t), SBX_EINVAL);
    ck_assert_int_eq(tarball_dir("/abs", t), SBX_EINVAL);
    ck_assert_int_eq(tarball_dir("a b", t), SBX_EINVAL);
    ck_assert_int_eq(tarball_dir(long_name, t), SBX_EINVAL);
    long_name[98] = '\0';
    ck_assert_int_eq(tarball_dir(long_name, t), 0);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("tarball");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_directory_header_is_valid_ustar,
        test_trailing_slash_is_not_doubled,
        test_bad_names_are_refused,
    ));
    return s;
}
