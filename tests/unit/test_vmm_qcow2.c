/* Unit tests for vmm_qcow2_standalone (worker/vmm): the header check a
 * microvm snapshot's disk passes before a worker keeps another worker's
 * copy of it. A standalone image is taken with its virtual size; a backing
 * file, an external data file, encryption, unknown features, another
 * version, a bad magic or a short header are refused. */
#include "check_util.h"
#include <stdint.h>
#include <string.h>

#include "errors.h"
#include "vmm.h"

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)(v & 0xff);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)(v & 0xff);
}

/* A version-3 header as qemu-img create writes one (cluster bits 16). */
static void header(unsigned char h[104], uint32_t version, uint64_t size)
{
    memset(h, 0, 104);
    memcpy(h, "QFI\xfb", 4);
    put32(h + 4, version);
    put32(h + 20, 16);
    put64(h + 24, size);
    put32(h + 100, 104);
}

START_TEST(test_a_standalone_image_is_taken_with_its_size)
{
    unsigned char h[104];
    uint64_t size = 0;
    char why[VMM_WHY_MAX] = "";
    header(h, 3, UINT64_C(1) << 30);
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), 0);
    ck_assert_uint_eq(size, UINT64_C(1) << 30);
    /* version 2: a 72-byte header, no feature fields */
    header(h, 2, 4096);
    ck_assert_int_eq(vmm_qcow2_standalone(h, 72, &size, why), 0);
    ck_assert_uint_eq(size, 4096);
    /* the dirty and corrupt bits, compression type and extended L2 are QEMU's own business */
    header(h, 3, 4096);
    put64(h + 72, 0x1b);
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), 0);
}
END_TEST

START_TEST(test_what_would_reach_beyond_the_file_is_refused)
{
    unsigned char h[104];
    uint64_t size = 0;
    char why[VMM_WHY_MAX] = "";
    header(h, 3, 4096);
    put64(h + 8, 512); /* a backing file's name at 512 */
    put32(h + 16, 11);
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "backing file"));
    header(h, 3, 4096);
    put32(h + 16, 11); /* a size alone says as much */
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
    header(h, 3, 4096);
    put64(h + 72, 1u << 2); /* an external data file */
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "external file"));
    header(h, 3, 4096);
    put64(h + 72, UINT64_C(1) << 40); /* a feature unknown here */
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
    header(h, 3, 4096);
    put32(h + 32, 2); /* LUKS */
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
}
END_TEST

START_TEST(test_what_is_not_qcow2_is_refused)
{
    unsigned char h[104];
    uint64_t size = 0;
    char why[VMM_WHY_MAX] = "";
    header(h, 3, 4096);
    h[3] = 0;
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
    header(h, 4, 4096);
    ck_assert_int_eq(vmm_qcow2_standalone(h, sizeof(h), &size, why), SBX_EINVAL);
    header(h, 3, 4096);
    ck_assert_int_eq(vmm_qcow2_standalone(h, 100, &size, why), SBX_EINVAL); /* v3 cut before its features end */
    ck_assert_int_eq(vmm_qcow2_standalone(h, 8, &size, why), SBX_EINVAL);
    ck_assert_int_eq(vmm_qcow2_standalone(h, 0, &size, why), SBX_EINVAL);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("vmm_qcow2");
    unit_tcase_add(s, "header", UNIT_TESTS(
        test_a_standalone_image_is_taken_with_its_size,
        test_what_would_reach_beyond_the_file_is_refused,
        test_what_is_not_qcow2_is_refused,
    ));
    return s;
}
