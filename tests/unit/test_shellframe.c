/* Unit tests for common/shellframe: the frames of an interactive shell as
 * they arrive in pieces, the types each direction takes, and the bounds. */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "shellframe.h"

/* Feeds n bytes one at a time; returns the frames' types in order. */
static size_t feed_bytewise(shellframe_dec_t *d, const unsigned char *buf, size_t n, int *types, size_t max, int *ret_r)
{
    size_t nt = 0;
    *ret_r = 0;
    for (size_t i = 0; i < n; i++) {
        size_t used = 0;
        shellframe_t f;
        int r = shellframe_next(d, buf + i, 1, &used, &f);
        if (r < 0) {
            *ret_r = r;
            return nt;
        }
        ck_assert_uint_eq(used, 1);
        if (r == 1 && nt < max)
            types[nt++] = f.type;
    }
    return nt;
}

START_TEST(test_frames_round_trip_in_any_pieces)
{
    unsigned char buf[64];
    size_t n = 0;
    shellframe_header(buf, SHELLFRAME_DATA, 3);
    memcpy(buf + 5, "ls\r", 3);
    n = 8;
    shellframe_resize(buf + n, 132, 43);
    n += 9;
    shellframe_header(buf + n, SHELLFRAME_EOF, 0);
    n += 5;
    shellframe_dec_t d;
    shellframe_dec_init(&d, SHELLFRAME_TO_WORKER);
    int types[8], r = 0;
    ck_assert_uint_eq(feed_bytewise(&d, buf, n, types, 8, &r), 3);
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(types[0], SHELLFRAME_DATA);
    ck_assert_int_eq(types[1], SHELLFRAME_RESIZE);
    ck_assert_int_eq(types[2], SHELLFRAME_EOF);
    /* All at once: one frame per call, the rest left. */
    shellframe_dec_init(&d, SHELLFRAME_TO_WORKER);
    size_t off = 0, used = 0;
    shellframe_t f;
    ck_assert_int_eq(shellframe_next(&d, buf, n, &used, &f), 1);
    ck_assert_uint_eq(used, 8);
    ck_assert_uint_eq(f.len, 3);
    ck_assert(memcmp(f.data, "ls\r", 3) == 0);
    off += used;
    ck_assert_int_eq(shellframe_next(&d, buf + off, n - off, &used, &f), 1);
    ck_assert_int_eq(f.type, SHELLFRAME_RESIZE);
    ck_assert_uint_eq(f.cols, 132);
    ck_assert_uint_eq(f.rows, 43);
    off += used;
    ck_assert_int_eq(shellframe_next(&d, buf + off, n - off, &used, &f), 1);
    ck_assert_int_eq(f.type, SHELLFRAME_EOF);
    off += used;
    ck_assert_uint_eq(off, n);
    ck_assert_int_eq(shellframe_next(&d, buf + off, 0, &used, &f), 0);

    shellframe_exit(buf, -1);
    shellframe_dec_init(&d, SHELLFRAME_TO_CLIENT);
    ck_assert_int_eq(shellframe_next(&d, buf, 9, &used, &f), 1);
    ck_assert_int_eq(f.type, SHELLFRAME_EXIT);
    ck_assert_int_eq(f.exit_code, -1);
    shellframe_exit(buf, 3);
    ck_assert_int_eq(shellframe_next(&d, buf, 9, &used, &f), 1);
    ck_assert_int_eq(f.exit_code, 3);
}
END_TEST

static int one(shellframe_dir_t dir, const unsigned char *buf, size_t n)
{
    shellframe_dec_t *d = malloc(sizeof *d);
    ck_assert_ptr_nonnull(d);
    shellframe_dec_init(d, dir);
    size_t used = 0;
    shellframe_t f;
    int r = shellframe_next(d, buf, n, &used, &f);
    free(d);
    return r;
}

START_TEST(test_directions_and_bounds_are_enforced)
{
    unsigned char b[16];
    /* EXIT only towards the client; RESIZE and EOF only towards the worker. */
    shellframe_exit(b, 0);
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 9), SBX_EINVAL);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 9), 1);
    shellframe_resize(b, 80, 24);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 9), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_EOF, 0);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 5), SBX_EINVAL);
    /* STDERR (a command without a terminal) only towards the client, 1..PAYLOAD_MAX. */
    shellframe_header(b, SHELLFRAME_STDERR, 1);
    b[5] = 'e';
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 6), 1);
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 6), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_STDERR, 0);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 5), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_STDERR, SHELLFRAME_PAYLOAD_MAX + 1);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 5), SBX_EINVAL);
    /* Unknown types, an empty DATA, an EOF with bytes, a short RESIZE. */
    for (int t = 0; t < 256; t++) {
        if (t >= SHELLFRAME_DATA && t <= SHELLFRAME_STDERR)
            continue;
        shellframe_header(b, t, 1);
        ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 5), SBX_EINVAL);
    }
    shellframe_header(b, SHELLFRAME_DATA, 0);
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 5), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_EOF, 1);
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 5), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_RESIZE, 3);
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 5), SBX_EINVAL);
    /* A DATA frame over the bound is refused from its header alone. */
    shellframe_header(b, SHELLFRAME_DATA, SHELLFRAME_PAYLOAD_MAX + 1);
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, b, 5), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_DATA, 0xffffffffu);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 5), SBX_EINVAL);
    shellframe_header(b, SHELLFRAME_DATA, SHELLFRAME_PAYLOAD_MAX);
    ck_assert_int_eq(one(SHELLFRAME_TO_CLIENT, b, 5), 0);
    /* Sizes 1..1000: 0 and 1001 are refused, the writer clamps. */
    unsigned char raw[9] = { SHELLFRAME_RESIZE, 0, 0, 0, 4, 0, 0, 0, 24 };
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, raw, 9), SBX_EINVAL);
    raw[5] = 0x03;
    raw[6] = 0xe9; /* 1001 */
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, raw, 9), SBX_EINVAL);
    raw[6] = 0xe8; /* 1000 */
    ck_assert_int_eq(one(SHELLFRAME_TO_WORKER, raw, 9), 1);
    shellframe_resize(b, 0, 5000);
    shellframe_dec_t d;
    shellframe_dec_init(&d, SHELLFRAME_TO_WORKER);
    size_t used;
    shellframe_t f;
    ck_assert_int_eq(shellframe_next(&d, b, 9, &used, &f), 1);
    ck_assert_uint_eq(f.cols, 1);
    ck_assert_uint_eq(f.rows, SHELLFRAME_SIZE_MAX);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("shellframe");
    unit_tcase_add(s, "frames", UNIT_TESTS(
        test_frames_round_trip_in_any_pieces,
        test_directions_and_bounds_are_enforced,
    ));
    return s;
}
