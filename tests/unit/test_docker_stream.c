/* Unit tests for worker/docker_stream: Docker's stdout/stderr framing. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "docker/docker_stream.h"
#include "errors.h"
#include "sbuf.h"

/* Appends one frame (header + payload) to b. */
static void frame(sbuf_t *b, int stream, const char *payload, size_t n)
{
    unsigned char h[8] = { (unsigned char)stream, 0, 0, 0,
                           (unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                           (unsigned char)n };
    ck_assert_int_eq(sbuf_append(b, h, sizeof h), 0);
    if (n)
        ck_assert_int_eq(sbuf_append(b, payload, n), 0);
}

/* A stream with every interesting frame: stdout, stderr, zero-length,
 * stdin (goes to stdout), a system-error frame (skipped). */
static void sample_stream(sbuf_t *b)
{
    sbuf_init(b, 0);
    frame(b, 1, "hello ", 6);
    frame(b, 2, "oops\n", 5);
    frame(b, 1, "", 0);
    frame(b, 1, "world\n", 6);
    frame(b, 3, "sys", 3);
    frame(b, 0, "in", 2);
    frame(b, 2, "", 0);
    frame(b, 2, "bad\n", 4);
}

#define SAMPLE_OUT "hello world\nin"
#define SAMPLE_ERR "oops\nbad\n"

static void check_sample(const sbuf_t *out, const sbuf_t *err, const docker_stream_t *d)
{
    ck_assert_str_eq(sbuf_cstr(out), SAMPLE_OUT);
    ck_assert_str_eq(sbuf_cstr(err), SAMPLE_ERR);
    ck_assert_uint_eq(out->seen, strlen(SAMPLE_OUT));
    ck_assert_uint_eq(err->seen, strlen(SAMPLE_ERR));
    ck_assert(!out->truncated);
    ck_assert(!err->truncated);
    ck_assert_uint_eq(d->frames, 8);
    ck_assert_uint_eq(d->ignored, 3);
    ck_assert(docker_stream_at_boundary(d));
}

START_TEST(test_whole_stream_routes_stdout_and_stderr)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    sample_stream(&in);
    sbuf_init(&out, 1024);
    sbuf_init(&err, 1024);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, in.data, in.len), 0);
    check_sample(&out, &err, &d);
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_every_two_chunk_split_gives_the_same_result)
{
    sbuf_t in;
    sample_stream(&in);
    for (size_t cut = 0; cut <= in.len; cut++) {
        sbuf_t out, err;
        docker_stream_t d;
        sbuf_init(&out, 1024);
        sbuf_init(&err, 1024);
        docker_stream_init(&d, &out, &err);
        ck_assert_int_eq(docker_stream_push(&d, in.data, cut), 0);
        ck_assert_int_eq(docker_stream_push(&d, in.data + cut, in.len - cut), 0);
        check_sample(&out, &err, &d);
        sbuf_release(&out);
        sbuf_release(&err);
    }
    sbuf_release(&in);
}
END_TEST

START_TEST(test_every_three_chunk_split_gives_the_same_result)
{
    sbuf_t in;
    sample_stream(&in);
    for (size_t a = 0; a <= in.len; a++) {
        for (size_t b = a; b <= in.len; b++) {
            sbuf_t out, err;
            docker_stream_t d;
            sbuf_init(&out, 1024);
            sbuf_init(&err, 1024);
            docker_stream_init(&d, &out, &err);
            ck_assert_int_eq(docker_stream_push(&d, in.data, a), 0);
            ck_assert_int_eq(docker_stream_push(&d, in.data + a, b - a), 0);
            ck_assert_int_eq(docker_stream_push(&d, in.data + b, in.len - b), 0);
            check_sample(&out, &err, &d);
            sbuf_release(&out);
            sbuf_release(&err);
        }
    }
    sbuf_release(&in);
}
END_TEST

START_TEST(test_byte_by_byte_gives_the_same_result)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    sample_stream(&in);
    sbuf_init(&out, 1024);
    sbuf_init(&err, 1024);
    docker_stream_init(&d, &out, &err);
    for (size_t i = 0; i < in.len; i++)
        ck_assert_int_eq(docker_stream_push(&d, in.data + i, 1), 0);
    check_sample(&out, &err, &d);
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_header_split_across_chunks_is_not_a_boundary)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    sbuf_init(&in, 0);
    frame(&in, 2, "abc", 3);
    sbuf_init(&out, 16);
    sbuf_init(&err, 16);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, in.data, 5), 0);
    ck_assert(!docker_stream_at_boundary(&d));
    ck_assert_uint_eq(err.seen, 0);
    ck_assert_int_eq(docker_stream_push(&d, in.data + 5, 4), 0); /* rest of header + 1 byte */
    ck_assert(!docker_stream_at_boundary(&d));
    ck_assert_str_eq(sbuf_cstr(&err), "a");
    ck_assert_int_eq(docker_stream_push(&d, in.data + 9, in.len - 9), 0);
    ck_assert(docker_stream_at_boundary(&d));
    ck_assert_str_eq(sbuf_cstr(&err), "abc");
    ck_assert_uint_eq(out.seen, 0);
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_bound_keeps_prefix_and_counts_everything)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    char big[1000];
    memset(big, 'x', sizeof big);
    sbuf_init(&in, 0);
    frame(&in, 1, "0123456789", 10);
    frame(&in, 2, "e", 1);
    frame(&in, 1, big, sizeof big);
    frame(&in, 1, "tail", 4);
    sbuf_init(&out, 16);
    sbuf_init(&err, 16);
    docker_stream_init(&d, &out, &err);
    /* In odd-sized chunks, so the bound is hit inside a chunk. */
    for (size_t i = 0; i < in.len; i += 7) {
        size_t n = in.len - i < 7 ? in.len - i : 7;
        ck_assert_int_eq(docker_stream_push(&d, in.data + i, n), 0);
    }
    ck_assert_uint_eq(out.len, 16);
    ck_assert_str_eq(sbuf_cstr(&out), "0123456789xxxxxx");
    ck_assert(out.truncated);
    ck_assert_uint_eq(out.seen, 10 + sizeof big + 4);
    ck_assert_str_eq(sbuf_cstr(&err), "e");
    ck_assert(!err.truncated);
    ck_assert_uint_eq(err.seen, 1);
    ck_assert(docker_stream_at_boundary(&d));
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_stderr_bound_is_independent_of_stdout)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    sbuf_init(&in, 0);
    frame(&in, 2, "abcdef", 6);
    frame(&in, 1, "ok", 2);
    sbuf_init(&out, 4);
    sbuf_init(&err, 4);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, in.data, in.len), 0);
    ck_assert_str_eq(sbuf_cstr(&err), "abcd");
    ck_assert(err.truncated);
    ck_assert_uint_eq(err.seen, 6);
    ck_assert_str_eq(sbuf_cstr(&out), "ok");
    ck_assert(!out.truncated);
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_zero_length_frames_only)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    sbuf_init(&in, 0);
    frame(&in, 1, "", 0);
    frame(&in, 2, "", 0);
    frame(&in, 1, "", 0);
    sbuf_init(&out, 4);
    sbuf_init(&err, 4);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, in.data, in.len), 0);
    ck_assert_uint_eq(d.frames, 3);
    ck_assert_uint_eq(out.seen, 0);
    ck_assert_uint_eq(err.seen, 0);
    ck_assert_str_eq(sbuf_cstr(&out), "");
    ck_assert(docker_stream_at_boundary(&d));
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_unknown_stream_ids_are_skipped_and_counted)
{
    sbuf_t in, out, err;
    docker_stream_t d;
    sbuf_init(&in, 0);
    frame(&in, 7, "zzzz", 4);
    frame(&in, 255, "y", 1);
    frame(&in, 1, "out", 3);
    sbuf_init(&out, 16);
    sbuf_init(&err, 16);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, in.data, in.len), 0);
    ck_assert_str_eq(sbuf_cstr(&out), "out");
    ck_assert_uint_eq(out.seen, 3);
    ck_assert_uint_eq(err.seen, 0);
    ck_assert_uint_eq(d.ignored, 5);
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_large_frame_size_uses_all_four_bytes)
{
    /* 0x00010203 = 66051 bytes: a header whose size needs three bytes. */
    size_t n = 0x00010203;
    char *payload = malloc(n);
    ck_assert_ptr_nonnull(payload);
    memset(payload, 'q', n);
    sbuf_t in, out, err;
    docker_stream_t d;
    sbuf_init(&in, 0);
    frame(&in, 1, payload, n);
    frame(&in, 2, "!", 1);
    sbuf_init(&out, 100);
    sbuf_init(&err, 100);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, in.data, in.len), 0);
    ck_assert_uint_eq(out.seen, n);
    ck_assert_uint_eq(out.len, 100);
    ck_assert(out.truncated);
    ck_assert_str_eq(sbuf_cstr(&err), "!");
    free(payload);
    sbuf_release(&in);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

START_TEST(test_empty_push_is_a_no_op)
{
    sbuf_t out, err;
    docker_stream_t d;
    sbuf_init(&out, 4);
    sbuf_init(&err, 4);
    docker_stream_init(&d, &out, &err);
    ck_assert_int_eq(docker_stream_push(&d, "", 0), 0);
    ck_assert(docker_stream_at_boundary(&d));
    ck_assert_uint_eq(d.frames, 0);
    sbuf_release(&out);
    sbuf_release(&err);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("docker_stream");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_whole_stream_routes_stdout_and_stderr,
        test_every_two_chunk_split_gives_the_same_result,
        test_every_three_chunk_split_gives_the_same_result,
        test_byte_by_byte_gives_the_same_result,
        test_header_split_across_chunks_is_not_a_boundary,
        test_bound_keeps_prefix_and_counts_everything,
        test_stderr_bound_is_independent_of_stdout,
        test_zero_length_frames_only,
        test_unknown_stream_ids_are_skipped_and_counted,
        test_large_frame_size_uses_all_four_bytes,
        test_empty_push_is_a_no_op,
    ));
    return s;
}
