/* Unit tests for worker/vmm/vmmproto: the agent channel's frame headers
 * (valid, partial, broken) and OPEN payloads round-tripped and bounded. */
#include "check_util.h"
#include <string.h>

#include "limits.h"
#include "vmmproto.h"

START_TEST(test_header_round_trips_and_waits_for_more)
{
    uint8_t h[VMM_FRAME_HEADER];
    vmm_frame_header_put(h, VMM_F_OUT, 7, 42);
    vmm_frame_t f;
    for (size_t n = 0; n < VMM_FRAME_HEADER; n++)
        ck_assert_int_eq(vmm_frame_header_parse(h, n, &f), 1);
    ck_assert_int_eq(vmm_frame_header_parse(h, sizeof(h), &f), 0);
    ck_assert_uint_eq(f.type, VMM_F_OUT);
    ck_assert_uint_eq(f.channel, 7);
    ck_assert_uint_eq(f.len, 42);
}
END_TEST

START_TEST(test_broken_headers_are_refused)
{
    uint8_t h[VMM_FRAME_HEADER];
    vmm_frame_t f;
    vmm_frame_header_put(h, VMM_F_OUT, 1, 1);
    h[0] ^= 1; /* magic */
    ck_assert_int_eq(vmm_frame_header_parse(h, 2, &f), -1);
    vmm_frame_header_put(h, VMM_F_OUT, 1, 1);
    h[3] = 1; /* reserved */
    ck_assert_int_eq(vmm_frame_header_parse(h, sizeof(h), &f), -1);
    vmm_frame_header_put(h, 0, 1, 1); /* no type 0 */
    ck_assert_int_eq(vmm_frame_header_parse(h, sizeof(h), &f), -1);
    vmm_frame_header_put(h, VMM_F_CLOSE + 1, 1, 1);
    ck_assert_int_eq(vmm_frame_header_parse(h, sizeof(h), &f), -1);
    vmm_frame_header_put(h, VMM_F_IN, 1, SBX_VMM_FRAME_MAX + 1);
    ck_assert_int_eq(vmm_frame_header_parse(h, sizeof(h), &f), -1);
    vmm_frame_header_put(h, VMM_F_IN, 1, SBX_VMM_FRAME_MAX);
    ck_assert_int_eq(vmm_frame_header_parse(h, sizeof(h), &f), 0);
}
END_TEST

START_TEST(test_open_payload_round_trips)
{
    const char *argv[] = {"sh", "-c", "echo $X"};
    const char *env[] = {"X=1", "PATH=/bin"};
    vmm_cmd_t c = {.cwd = "/tmp", .argv = argv, .argc = 3, .env = env, .envc = 2, .rows = 30, .cols = 100};
    uint8_t buf[256];
    long n = vmm_open_cmd_encode(VMM_OPEN_PTY, &c, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    const char *av[8], *ev[8];
    vmm_cmd_t d;
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 7, ev, 7), 0);
    ck_assert_str_eq(d.cwd, "/tmp");
    ck_assert_uint_eq(d.argc, 3);
    ck_assert_str_eq(d.argv[2], "echo $X");
    ck_assert_ptr_null(d.argv[3]);
    ck_assert_uint_eq(d.envc, 2);
    ck_assert_str_eq(d.env[1], "PATH=/bin");
    ck_assert_uint_eq(d.rows, 30);
    ck_assert_uint_eq(d.cols, 100);
    n = vmm_open_cmd_encode(VMM_OPEN_EXEC, &c, buf, sizeof(buf));
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 7, ev, 7), 0);
    ck_assert_uint_eq(d.rows, 0);
}
END_TEST

START_TEST(test_open_payload_bounds_and_garbage)
{
    const char *argv[] = {"true"};
    vmm_cmd_t c = {.argv = argv, .argc = 1};
    uint8_t buf[64];
    const char *av[4], *ev[4];
    vmm_cmd_t d;
    ck_assert_int_eq(vmm_open_cmd_encode(VMM_OPEN_EXEC, &c, buf, 10), -1); /* does not fit */
    c.argc = 0;
    ck_assert_int_eq(vmm_open_cmd_encode(VMM_OPEN_EXEC, &c, buf, sizeof(buf)), -1);
    c.argc = SBX_MAX_ARGV + 1;
    ck_assert_int_eq(vmm_open_cmd_encode(VMM_OPEN_EXEC, &c, buf, sizeof(buf)), -1);
    c.argc = 1;
    ck_assert_int_eq(vmm_open_cmd_encode(VMM_OPEN_DIAL, &c, buf, sizeof(buf)), -1);
    long n = vmm_open_cmd_encode(VMM_OPEN_EXEC, &c, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    /* every truncation is refused, never read past */
    for (long k = 0; k < n; k++)
        ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)k, &d, av, 3, ev, 3), -1);
    /* a trailing byte, a string without its NUL, counts over the caller's room */
    buf[n] = 'x';
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n + 1, &d, av, 3, ev, 3), -1);
    buf[n - 1] = 'x';
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 3, ev, 3), -1);
    buf[n - 1] = '\0';
    vmm_put_u32(buf + 1, 4);
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 3, ev, 3), -1);
    vmm_put_u32(buf + 1, 1);
    vmm_put_u32(buf + 5, 0xffffffffu);
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 3, ev, 3), -1);
    vmm_put_u32(buf + 5, 0);
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 3, ev, 3), 0);
    buf[0] = VMM_OPEN_DIAL;
    ck_assert_int_eq(vmm_open_cmd_decode(buf, (size_t)n, &d, av, 3, ev, 3), -1);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("vmmproto");
    unit_tcase_add(s, "frames", UNIT_TESTS(
        test_header_round_trips_and_waits_for_more,
        test_broken_headers_are_refused,
        test_open_payload_round_trips,
        test_open_payload_bounds_and_garbage,
    ));
    return s;
}
